"""StepOverview against a brute-force reference: whatever the chunks steps arrive in, the range
asked for and the point budget, a line is exactly each aligned bin's first minimum and first
maximum in time order, broken (a NaN) wherever an idle gap lies between two points drawn, each
piece starting at its first step's start."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.live.step_overview import IDLE_GAP_S, StepOverview


def reference_line(times, starts, values, start, stop, max_points):
    """Plain loops over the steps in [start, stop)."""
    breaks = [False] + [starts[i] - times[i - 1] > IDLE_GAP_S for i in range(1, len(times))]
    count = stop - start
    width = 1 if count <= max_points else 2 ** math.ceil(math.log2(count / (max_points // 2 - 2)))
    edges = sorted({start, stop, *range((start + width - 1) // width * width, stop, width)})
    xs, ys, last = [], [], None
    for low, high in zip(edges, edges[1:]):
        inside = values[low:high]
        lowest = low + inside.index(min(inside))
        highest = low + inside.index(max(inside))
        for index in sorted({lowest, highest}):
            gap = last is not None and any(breaks[last + 1 : index + 1])
            if gap:
                xs.append(math.nan)
                ys.append(math.nan)
            if last is None or gap:  # a piece starts where its first step started
                xs.append(starts[index])
                ys.append(values[index])
            xs.append(times[index])
            ys.append(values[index])
            last = index
    return xs, ys


def steps_with_gaps(durations, gaps, values):
    times, starts, now = [], [], 0.0
    for duration, gap in zip(durations, gaps):
        starts.append(now + gap)
        now += gap + duration
        times.append(now)
    return {"time_s": np.array(times), "start_s": np.array(starts), "v": np.array(values, dtype=float)}


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_line_is_each_bins_extremes_and_breaks_at_every_idle_gap(data):
    n = data.draw(st.integers(1, 700))
    durations = data.draw(st.lists(st.sampled_from([0.01, 0.05, 0.1]), min_size=n, max_size=n))
    gaps = data.draw(st.lists(st.sampled_from([0.0, 0.0, 0.0, 0.0, 1.0]), min_size=n, max_size=n))
    values = data.draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))  # small range: many ties
    steps = steps_with_gaps(durations, gaps, values)
    overview = StepOverview(("v",), capacity=10_000)
    begin = 0
    while begin < n:  # arrives in chunks, as frames read it
        size = data.draw(st.integers(1, 100))
        overview.extend({name: column[begin : begin + size] for name, column in steps.items()})
        begin += size
    max_points = data.draw(st.integers(6, 80))
    times = steps["time_s"]
    low_x = data.draw(st.floats(-1.0, float(times[-1]) + 1))
    x_range = data.draw(st.one_of(st.none(), st.just((low_x, low_x + data.draw(st.floats(0.0, float(times[-1]) + 1))))))
    start, stop = overview.index_range(x_range)
    x, y = overview.line("v", x_range, max_points)
    if stop <= start:
        assert x.size == 0
        return
    expected_x, expected_y = reference_line(times.tolist(), steps["start_s"].tolist(), values, start, stop, max_points)
    np.testing.assert_array_equal(x, expected_x)
    np.testing.assert_array_equal(y, expected_y)
    assert (~np.isnan(x)).sum() <= 2 * max_points  # each extreme, and a piece's start where one begins


def test_a_range_is_drawn_from_the_step_before_it_to_the_step_after_it():
    steps = steps_with_gaps([0.1] * 100, [0.0] * 100, list(range(100)))
    overview = StepOverview(("v",))
    overview.extend(steps)
    x, _ = overview.line("v", (2.05, 3.05))
    assert x[0] == steps["start_s"][19] and x[1] == steps["time_s"][19] < 2.05 and x[-1] == steps["time_s"][30] > 3.05


def test_counters_are_markers_where_they_rise_across_chunks():
    steps = steps_with_gaps([0.1] * 6, [0.0] * 6, [0] * 6)
    steps["preemptions_total"] = np.array([0, 0, 1, 1, 3, 3], dtype=float)
    overview = StepOverview(("v",), ("preemptions_total",))
    overview.extend({name: column[:3] for name, column in steps.items()})
    overview.extend({name: column[3:] for name, column in steps.items()})
    np.testing.assert_allclose(overview.rises("preemptions_total"), steps["time_s"][[2, 4]])


def test_past_its_capacity_the_older_half_is_dropped_and_lines_still_match():
    rng = np.random.default_rng(1)
    steps = steps_with_gaps(
        [0.1] * 5000, rng.choice([0.0, 1.0], 5000, p=[0.99, 0.01]).tolist(), rng.integers(0, 100, 5000).tolist()
    )
    overview = StepOverview(("v",), capacity=3000)
    for begin in range(0, 5000, 250):
        overview.extend({name: column[begin : begin + 250] for name, column in steps.items()})
    assert 1500 <= overview.size <= 3000 and overview.column("time_s")[-1] == steps["time_s"][-1]
    kept = {name: column[-overview.size :] for name, column in steps.items()}
    fresh = StepOverview(("v",), capacity=3000)
    fresh.extend(kept)
    for max_points in (50, 400):
        np.testing.assert_array_equal(overview.line("v", None, max_points)[1], fresh.line("v", None, max_points)[1])


def test_a_counter_rise_is_found_wherever_the_steps_arrive_split():
    """A rise on the first step of a chunk is read against the last step of the chunk before."""
    steps = steps_with_gaps([0.1] * 6, [0.0] * 6, [0] * 6)
    steps["preemptions_total"] = np.array([0, 0, 1, 2, 2, 3])
    for split in range(1, 6):
        overview = StepOverview(("v",), counters=("preemptions_total",))
        overview.extend({name: column[:split] for name, column in steps.items()})
        overview.extend({name: column[split:] for name, column in steps.items()})
        np.testing.assert_array_equal(overview.rises("preemptions_total"), steps["time_s"][[2, 3, 5]])
