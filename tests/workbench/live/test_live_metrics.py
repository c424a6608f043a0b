"""LiveMetrics, the window's copy of a MetricsStore, read a few rows per frame: it holds what
the store holds, whatever the reads' timing, and past the store's capacity it keeps the newest."""

from __future__ import annotations

import numpy as np

from engine.requests.metrics import RequestMetrics, StepStats
from workbench.live.live_metrics import LiveMetrics
from workbench.live.metrics_store import MetricsStore


def add(store: MetricsStore, index: int) -> None:
    store.add_step(StepStats(index * 0.1 + 0.1, 0.1, index % 7, 3, 2, index % 5, 100, 0, 1, 0, 2, index // 9, 0, 0, 0))
    if index % 3 == 0:
        start = index * 0.1
        store.add_request(
            RequestMetrics(
                start, 4, start, start + 0.05, start + 0.1, [start + 0.05, start + 0.1], finish_reason="length"
            ),
            "chat",
            f"chat-{index}",
        )


def test_the_copy_holds_what_the_store_holds_read_in_any_chunks():
    store = MetricsStore(0.0, step_capacity=5000, request_capacity=2000)
    live = LiveMetrics(store)
    rng = np.random.default_rng(5)
    index = 0
    for _ in range(40):  # 40 frames, each after a random number of steps
        for _ in range(int(rng.integers(0, 60))):
            add(store, index)
            index += 1
        live.refresh()
    copy, original = live.snapshot(), store.snapshot()
    for name, column in original.steps.items():
        np.testing.assert_array_equal(copy.steps[name], column, err_msg=name)
    for name, column in original.requests.items():
        np.testing.assert_array_equal(copy.requests[name], column, err_msg=name)
    assert copy.request_ids == original.request_ids and copy.request_tags == original.request_tags
    assert not live.refresh()  # nothing new


def test_past_the_stores_capacity_the_copy_keeps_the_newest_rows_in_order():
    store = MetricsStore(0.0, step_capacity=200, request_capacity=50)
    live = LiveMetrics(store)
    for index in range(1000):
        add(store, index)
        if index % 37 == 0:
            live.refresh()
    live.refresh()
    copy, original = live.snapshot(), store.snapshot()
    times = copy.steps["time_s"]
    assert 100 <= times.size <= 200 and np.all(np.diff(times) > 0)
    np.testing.assert_array_equal(times, original.steps["time_s"][-times.size :])
    ids = copy.request_ids
    assert 25 <= len(ids) <= 50 and ids == original.request_ids[-len(ids) :]
    np.testing.assert_array_equal(copy.requests["finish_s"], original.requests["finish_s"][-len(ids) :])


def test_rows_since_copies_only_the_new_rows():
    store = MetricsStore(0.0, step_capacity=100)
    for index in range(250):
        add(store, index)
    new = store.rows_since(240, 0)
    assert new.steps_count == 250 and new.steps["time_s"].size == 10 and new.steps["time_s"][0] == 24.1
    assert store.rows_since(0, 0).steps["time_s"].size == 100  # what was overwritten is gone
