"""The plot classes: data lands in the persistent items, units are on the axes, and repeated
updates do not leak references (PySide6 6.12.0 lost one to None per setData and crashed)."""

from __future__ import annotations

import sys

import numpy as np
import pyqtgraph as pg

from engine.requests.metrics import RequestMetrics, StepStats
from tests.workbench.gui.window_helpers import filled_store
from workbench.analysis.intervals import percentile_interval
from workbench.gui.charts.plots import LatencyPlot, all_plots
from workbench.live.metrics_store import MetricsStore
from workbench.live.rolling_percentiles import ROLLING_WINDOW
from workbench.traffic.scenario import SLO


def plots_in_a_view(qtbot) -> tuple[pg.GraphicsLayoutWidget, dict]:
    """The view is returned too: the caller must keep it alive while the plots are used."""
    plots = all_plots()
    view = pg.GraphicsLayoutWidget()
    qtbot.addWidget(view)
    for plot in plots.values():
        view.addItem(plot.plot)
    return view, plots


def test_every_plot_shows_the_snapshot_with_units(qtbot):
    snapshot = filled_store().snapshot()
    _view, plots = plots_in_a_view(qtbot)
    for name, plot in plots.items():
        plot.update(snapshot)
        # The shared time axis is labelled once, under the bottom plot; the latency plot's is its own.
        labelled = name in ("batch_composition", "latency")
        assert plot.plot.getAxis("bottom").labelUnits == ("s" if labelled else "")
    assert plots["kv_occupancy"].used.getData()[1][0] == 100 * 30 / 64
    assert "1,024 tokens" in plots["kv_occupancy"].plot.titleLabel.text
    assert plots["queue_depth"].preemptions.getData()[0].size == 5  # the counter rose 5 times
    latency = plots["latency"]
    assert "n=200" in latency.plot.titleLabel.text and latency.slo_line.value() == 60.0
    assert latency.plot.getAxis("left").labelUnits == "ms"
    assert snapshot.goodput == (21, 200)  # TTFT = 50 + 0.5 i ms meets the 60 ms SLO for i <= 20


def test_the_latency_title_gives_intervals_once_the_run_is_whole(qtbot):
    """While requests still end the percentiles move, so they stand alone; a whole run's get the
    intervals report.json gives them (TTFT = 50 + 0.5 i ms for i < 200 in filled_store)."""
    snapshot = filled_store().snapshot()
    _view, plots = plots_in_a_view(qtbot)
    latency = plots["latency"]
    latency.update(snapshot)
    assert "<br>" not in latency.plot.title_text and latency.plot.titleLabel.toolTip() == ""
    latency.whole = True
    latency.update(snapshot)
    ttft = snapshot.requests["ttft_ms"]
    expected = [percentile_interval(ttft, q) for q in (50, 90, 99)]
    # 200 requests bound p50 and p90 on both sides; a p99 only from below (368 would bound it).
    assert latency.plot.title_text.endswith(
        "(n=200)<br>95%: "
        + " / ".join(f"p{q} {i.low:.0f}–{i.high:.0f}" for q, i in zip((50, 90), expected))
        + f" / p99 ≥{expected[2].low:.0f} ms"
    )
    assert expected[0].low < 99.75 < expected[0].high  # the interval holds the run's p50
    assert "order statistics of the n requests" in latency.plot.titleLabel.toolTip()


def test_a_whole_runs_intervals_are_computed_once_not_on_every_zoom(qtbot, monkeypatch):
    import workbench.gui.charts.plots as plots_module

    computed = []
    real = plots_module.percentile_intervals_line
    monkeypatch.setattr(plots_module, "percentile_intervals_line", lambda *args: computed.append(1) or real(*args))
    snapshot = filled_store().snapshot()
    _view, plots = plots_in_a_view(qtbot)
    latency = plots["latency"]
    latency.whole = True
    for x_range in (None, (0.0, 50.0), (10.0, 20.0)):  # the title is the whole run's whatever is drawn
        latency.update(snapshot, x_range)
    assert len(computed) == 1 and "<br>95%: p50" in latency.plot.title_text
    latency.set_mode("tpot")
    latency.update(snapshot)
    assert len(computed) == 2  # another column, other intervals


def test_repeated_updates_do_not_lose_references(qtbot):
    snapshot = filled_store().snapshot()
    _view, plots = plots_in_a_view(qtbot)
    before = sys.getrefcount(None)
    for _ in range(100):
        for plot in plots.values():
            plot.update(snapshot)
    assert before - sys.getrefcount(None) < 500  # 6.12.0 lost about 50,000 here


def test_metrics_store_is_bounded_and_ordered():
    store = MetricsStore(0.0, step_capacity=50, request_capacity=10)
    for index in range(120):
        store.add_step(StepStats(float(index), 0.1, index, 0, 1, 1, 10, 0, 0, 0, 1, 0, 0, 0, 0))
    steps = store.snapshot().steps
    assert steps["time_s"].size == 50 and np.all(np.diff(steps["time_s"]) > 0) and steps["time_s"][-1] == 119


def test_windowed_token_rates_are_computed_as_steps_arrive_and_match_their_definition():
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.exponential(0.3, 400))
    prefill, decode = rng.integers(0, 500, 400), rng.integers(0, 40, 400)
    store = MetricsStore(0.0, step_capacity=150, window_s=2.0)  # wraps: rates cover every step ever added
    for time_s, p, d in zip(times, prefill, decode):
        store.add_step(StepStats(float(time_s), 0.1, int(p), int(d), 1, 1, 10, 0, 0, 0, 1, 0, 0, 0, 0))
    snapshot = store.snapshot()
    # The definition: tokens of the steps that ended in (t - 2 s, t], over 2 s.
    expected_prefill = [prefill[(times > t - 2.0) & (times <= t)].sum() / 2.0 for t in times[-150:]]
    expected_decode = [decode[(times > t - 2.0) & (times <= t)].sum() / 2.0 for t in times[-150:]]
    assert np.allclose(snapshot.prefill_tok_s, expected_prefill) and np.allclose(snapshot.decode_tok_s, expected_decode)


def test_lines_break_where_the_engine_sat_idle(qtbot):
    """Issue 19 #15: lines ramped across idle gaps as if they were data. Steps at 0.1 s intervals,
    then 5 s with no step (the second step of the pair starts 5 s after the first ended)."""
    from workbench.live.step_overview import IDLE_GAP_S

    store = MetricsStore(0.0)
    for end, duration, prefill in ((0.1, 0.1, 8), (0.2, 0.1, 4), (5.3, 0.1, 6), (9.0, 3.5, 2)):
        store.add_step(StepStats(end, duration, prefill, 1, 1, 1, 4, 0, 0, 0, 1, 0, 0, 0, 0))
    _view, plots = plots_in_a_view(qtbot)
    plots["batch_composition"].update(store.snapshot())
    times, prefill = plots["batch_composition"].prefill.getData()
    # One break, between 0.2 and 5.2; none before the 3.5 s step (busy, not idle: 9.0 - 3.5 - 5.3 = 0.2 s <=
    # IDLE_GAP_S).
    assert 9.0 - 3.5 - 5.3 <= IDLE_GAP_S
    # Each piece starts where its first step started (0.0, 5.2): a step holds its value while it runs.
    np.testing.assert_allclose(times, [0.0, 0.1, 0.2, np.nan, 5.2, 5.3, 9.0])
    np.testing.assert_array_equal(prefill, [8, 8, 4, np.nan, 6, 6, 2])


def test_legends_sit_under_the_plot_and_decode_has_its_own_axis(qtbot):
    """Issue 19 #15: legends covered data and the SLO label; decode sequences (a few) shared an axis
    with prefill tokens (hundreds) and drew flat."""
    snapshot = filled_store().snapshot()
    view, plots = plots_in_a_view(qtbot)
    view.resize(900, 1400)
    view.show()
    for plot in plots.values():
        plot.update(snapshot)
    qtbot.wait(50)
    for name, plot in plots.items():
        legend, data_area = plot.plot.legend, plot.plot.vb
        assert legend.parentItem() is plot.plot and legend.items, name
        assert legend.sceneBoundingRect().top() >= data_area.sceneBoundingRect().bottom(), (
            f"{name}: the legend overlaps the data"
        )
    batch = plots["batch_composition"]
    assert batch.decode.getViewBox() is batch.decode_view and batch.decode_view is not batch.plot.vb
    assert batch.plot.getAxis("right").labelText == "decode" and batch.plot.getAxis("right").isVisible()
    batch.decode_view.autoRange()
    low, high = batch.decode_view.viewRange()[1]
    assert low <= 5 <= high and high < 50  # decode's own scale, not the prefill axis


def test_a_capacity_the_backend_does_not_give_is_not_drawn_as_zero(qtbot):
    _view, plots = plots_in_a_view(qtbot)
    store = MetricsStore(0.0, kv_capacity_tokens=46_592, kv_cache_bytes=0)
    plots["kv_occupancy"].update(store.snapshot())
    assert plots["kv_occupancy"].plot.titleLabel.text == "KV-cache occupancy: 46,592 tokens"
    plots["kv_occupancy"].update(MetricsStore(0.0).snapshot())
    assert plots["kv_occupancy"].plot.titleLabel.text == "KV-cache occupancy: capacity not exposed"


def test_a_frame_hands_pyqtgraph_bounded_work_whatever_the_store_holds(qtbot):
    """The frame-time guard, counted rather than timed (timed assertions flake on shared
    machines): what made frames slow was work per frame that grew with the run, so the test
    bounds it. With 50,000 steps and 10,000 requests, as the window draws them (LiveMetrics):
    every line gets at most MAX_LINE_POINTS points, the latency scatter at most
    MAX_SCATTER_POINTS, no plot draws a grid; a frame that brings only a new step leaves the
    latency plot alone, and one that brings a finished request appends its points without
    handing pyqtgraph the others again."""
    from engine.requests.metrics import RequestMetrics
    from workbench.gui.charts.plots import MAX_SCATTER_POINTS
    from workbench.gui.plots_view import PlotsView
    from workbench.live.live_metrics import LiveMetrics
    from workbench.live.step_overview import MAX_LINE_POINTS

    rng = np.random.default_rng(0)
    store = MetricsStore(0.0, kv_capacity_tokens=23_296, step_capacity=60_000, request_capacity=11_000)
    for index in range(50_000):
        store.add_step(
            StepStats(
                index * 0.07,
                0.07,
                int(rng.integers(0, 512)),
                32,
                40,
                int(rng.integers(0, 1456)),
                1456,
                10,
                5,
                0,
                32,
                0,
                0,
                0,
                0,
            )
        )

    def finish(index: int) -> None:
        end = index * 0.35 + 3
        store.add_request(
            RequestMetrics(end - 3, 100, end - 3, end - 2.7, end, [end - 2.7, end], finish_reason="length"),
            "chat",
            f"chat-{index}",
        )

    for index in range(10_000):
        finish(index)
    view = PlotsView()
    qtbot.addWidget(view)
    live = LiveMetrics(store)
    live.refresh()
    view.update_from(live.snapshot())
    for name, plot in view.plots.items():
        assert not plot.plot.getAxis("left").grid and not plot.plot.getAxis("bottom").grid, name
        for item in plot.plot.listDataItems():
            x = item.getData()[0]
            limit = MAX_SCATTER_POINTS if isinstance(item, pg.ScatterPlotItem) else MAX_LINE_POINTS
            assert x is None or (~np.isnan(x)).sum() <= limit, (name, item.name(), len(x))
    scatter = view.latency.points["ttft"].item
    handed = []
    for method in ("setData", "addPoints"):
        original = getattr(scatter, method)
        setattr(
            scatter,
            method,
            lambda *args, original=original, method=method, **kwargs: (
                handed.append((method, kwargs.get("x", args[0] if args else []))),
                original(*args, **kwargs),
            )[1],
        )
    store.add_step(StepStats(50_000 * 0.07, 0.07, 10, 32, 40, 700, 1456, 10, 5, 0, 32, 0, 0, 0, 0))
    live.refresh()
    view.update_from(live.snapshot())
    assert handed == []
    finish(10_000)
    live.refresh()
    view.update_from(live.snapshot())
    assert [(method, len(x)) for method, x in handed] == [("addPoints", 1)]


def test_snapshots_taken_while_the_engine_adds_steps_are_whole():
    """Snapshots copy outside the lock until the rings wrap: every row they hold is complete."""
    import threading

    from engine.requests.metrics import RequestMetrics

    store = MetricsStore(0.0, step_capacity=300_000, request_capacity=50_000)
    done = threading.Event()

    def engine() -> None:
        for index in range(200_000):
            store.add_step(StepStats(index * 0.01 + 0.01, 0.01, 5, 3, 2, 7, 100, 0, 1, 0, 2, 0, 0, 0, 0))
            if index % 10 == 0:
                store.add_request(
                    RequestMetrics(
                        index * 0.01,
                        4,
                        index * 0.01,
                        index * 0.01 + 0.005,
                        index * 0.01 + 0.01,
                        [index * 0.01 + 0.005, index * 0.01 + 0.01],
                        finish_reason="length",
                    ),
                    "chat",
                    f"chat-{index}",
                )
        done.set()

    writer = threading.Thread(target=engine)
    writer.start()
    seen = 0
    while not done.is_set() or seen == 0:
        snapshot = store.snapshot()
        steps, requests = snapshot.steps, snapshot.requests
        assert all(not np.isnan(column).any() for name, column in steps.items())
        assert np.all(np.diff(steps["time_s"]) > 0)
        assert not np.isnan(requests["finish_s"]).any() and len(snapshot.request_ids) == requests["finish_s"].size
        assert all(snapshot.request_ids)  # no id slot read before it was written
        seen += 1
    writer.join()
    assert seen > 1


def test_an_empty_or_flat_latency_plot_runs_from_zero_to_above_its_highest_value(qtbot):
    """Auto-range zoomed into a sliver around the SLO line or a flat series (overlapping ticks
    1499.8 / 1500.0 / 1500.4), and drew an empty plot's SLO at 0 with negative ticks."""
    _view, plots = plots_in_a_view(qtbot)
    latency = plots["latency"]
    empty = MetricsStore(0.0, slo=SLO(ttft_ms=1500.0))
    latency.update(empty.snapshot())
    assert latency.plot.viewRange()[1] == [0.0, 1875.0]
    flat = MetricsStore(0.0, slo=SLO(ttft_ms=1500.0))
    for index in range(5):
        flat.add_request(
            RequestMetrics(index, 5, index, index + 1.5, index + 1.5, [index + 1.5], finish_reason="length"), "chat"
        )
    latency.update(flat.snapshot())
    assert latency.plot.viewRange()[1] == [0.0, 1875.0]
    latency.update(filled_store().snapshot())  # spread values: the plot ranges itself again
    assert latency.plot.getViewBox().autoRangeEnabled()[1]
    latency.set_mode("tpot")
    latency.update(filled_store().snapshot())
    assert latency.plot.getAxis("left").labelText == "TPOT" and latency.plot.getAxis("left").labelUnits == "ms/token"


def test_ttft_and_e2e_each_get_an_axis_of_their_own(qtbot):
    """Issue 48 #5: with TTFT and e2e on one linear axis, e2e's seconds put every TTFT point and
    its rolling percentiles on the zero line. Each is now drawn alone, ranged to its own values."""
    store = MetricsStore(0.0, slo=SLO(ttft_ms=200.0, e2e_ms=9000.0))
    for index in range(40):  # TTFT 50-89 ms, e2e 8-8.4 s: a hundredth of e2e's range
        ttft = 0.05 + index / 1000
        store.add_request(
            RequestMetrics(
                index, 8, index, index + ttft, index + 8 + index / 100, [index + ttft], finish_reason="stop"
            ),
            "chat",
        )
    _view, plots = plots_in_a_view(qtbot)
    latency = plots["latency"]
    ranges = {}
    for mode in LatencyPlot.MODES[:2]:
        latency.set_mode(mode)
        latency.update(store.snapshot())
        latency.plot.vb.updateAutoRange()
        drawn = {key: points.getData()[1].size for key, points in latency.points.items()}
        assert drawn == {key: 40 if key == mode else 0 for key in drawn}
        assert latency.plot.getAxis("left").labelText == {"ttft": "TTFT", "e2e": "e2e"}[mode]
        assert latency.slo_line.label.format.startswith(f"SLO {mode.upper()}")
        ranges[mode] = latency.plot.viewRange()[1]
    low, high = ranges["ttft"]
    assert high < 300  # TTFT's points and its SLO fill the axis, not 1% of it
    assert ranges["e2e"][1] > 8400


def test_a_click_in_any_plot_selects_the_time_under_it(qtbot):
    """Issue 34 #18 said clicking the batch plot selected no step (its decode axis is a second view
    box laid over it); a real click under Xvfb did select one, and this keeps every plot so."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from workbench.gui.plots_view import PlotsView

    view = PlotsView()
    qtbot.addWidget(view)
    view.resize(1000, 800)
    view.show()
    qtbot.waitExposed(view)
    view.update_from(filled_store(requests=50).snapshot())
    qtbot.wait(50)  # laid out with the new titles
    clicked = []
    view.time_clicked.connect(clicked.append)
    for name, plot in view.plots.items():
        box = plot.plot.vb.sceneBoundingRect()
        where = view.layout_widget.mapFromScene(box.center())
        expected = float(plot.plot.vb.mapSceneToView(box.center()).x())
        QTest.mouseMove(view.layout_widget.viewport(), where)
        QTest.mouseClick(
            view.layout_widget.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, where
        )
        assert clicked and abs(clicked[-1] - expected) < 1.0, name
        clicked.clear()


def test_slow_steps_far_apart_are_drawn_and_idle_time_is_never_a_ramp(qtbot):
    """Slow eager steps beside a compile, each past an idle gap, drew nothing (a lone point between
    two breaks has no line); past the point budget a bin joined its extremes across a gap."""
    store = MetricsStore(0.0, kv_capacity_tokens=1024, kv_cache_bytes=2**20, slo=SLO())
    for index in range(5):  # a 2 s step every 10 s
        store.add_step(StepStats(10.0 * index + 2.0, 2.0, 0, 4, 4, 10 + index, 64, 0, 0, 0, 4, 0, 0, 0, 0))
    _view, plots = plots_in_a_view(qtbot)
    plots["kv_occupancy"].update(store.snapshot())
    x, y = plots["kv_occupancy"].used.getData()
    pieces = [piece for piece in np.split(x, np.flatnonzero(np.isnan(x))) if piece[~np.isnan(piece)].size]
    assert len(pieces) == 5  # one per step, broken at every gap
    for index, piece in enumerate(pieces):  # each as long as its step, where it ran
        np.testing.assert_allclose(piece[~np.isnan(piece)], [10.0 * index, 10.0 * index + 2.0])

    busy = MetricsStore(0.0, kv_capacity_tokens=1024, kv_cache_bytes=2**20, slo=SLO())
    for index in range(20_000):  # 0.01 s steps, and a 100 s idle gap inside a bin
        end = index * 0.01 + 0.01 + (100.0 if index >= 10_007 else 0.0)
        busy.add_step(StepStats(end, 0.01, 0, 4, 4, index % 64, 64, 0, 0, 0, 4, 0, 0, 0, 0))
    plots["kv_occupancy"].update(busy.snapshot())
    x, _ = plots["kv_occupancy"].used.getData()
    drawn = x[~np.isnan(x)]
    assert drawn.size < 20_000  # binned
    joined = [(a, b) for a, b in zip(x[:-1], x[1:]) if not (np.isnan(a) or np.isnan(b))]
    assert all(b - a < 50.0 for a, b in joined)  # no segment spans the 100 s of idle time


def test_the_latency_legend_reads_as_it_will_before_any_request(qtbot):
    """Issue 77 #6: before the first load the legend listed every kind of point and line, and its
    width put the queue-depth plot behind a sideways scrollbar at 1280 px (13 px under Xvfb)."""
    plot = LatencyPlot()
    labels = [label.text for _, label in plot.plot.legend.items]
    plot.update(filled_store(requests=20).snapshot())
    expected = ["TTFT", f"p50 of last {ROLLING_WINDOW}", "p90", "p99"]
    assert labels == [label.text for _, label in plot.plot.legend.items] == expected
