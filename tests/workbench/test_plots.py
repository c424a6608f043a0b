"""The plot classes: data lands in the persistent items, units are on the axes, and repeated
updates do not leak references (PySide6 6.12.0 lost one to None per setData and crashed)."""

from __future__ import annotations

import sys

import numpy as np
import pyqtgraph as pg

from engine.metrics import RequestMetrics, StepStats
from engine.metrics_store import MetricsStore
from engine.scenario import SLO
from workbench.plots import all_plots


def filled_store(steps: int = 300, requests: int = 200) -> MetricsStore:
    store = MetricsStore(0.0, kv_capacity_tokens=1024, kv_cache_bytes=2**20, slo=SLO(ttft_ms=60.0))
    for index in range(steps):
        store.add_step(StepStats(index * 0.1, 0.1, 10, 5, 5, 30, 64, 2, 4, 0, 3, index // 50, 0, 0, 0))
    for index in range(requests):
        start = index * 0.1
        store.add_request(RequestMetrics(start, 5, start, start + 0.05 + 0.0005 * index, start + 0.3,
                                         [start + 0.05 + 0.0005 * index, start + 0.2, start + 0.3], finish_reason="length"), "chat")
    return store


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
    for plot in plots.values():
        plot.update(snapshot)
        assert plot.plot.getAxis("bottom").labelUnits == "s"
    assert plots["kv_occupancy"].used.getData()[1][0] == 100 * 30 / 64
    assert "1,024 tokens" in plots["kv_occupancy"].plot.titleLabel.text
    assert plots["queue_depth"].preemptions.getData()[0].size == 5  # the counter rose 5 times
    latency = plots["latency"]
    assert "n=200" in latency.plot.titleLabel.text and latency.slo_line.value() == 60.0
    assert latency.plot.getAxis("left").labelUnits == "ms"
    assert snapshot.goodput == (21, 200)  # TTFT = 50 + 0.5 i ms meets the 60 ms SLO for i <= 20


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
