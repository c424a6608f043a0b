"""The window with a real worker thread and a tiny model (pytest-qt, offscreen): the plots: what
traffic draws, hovering and selecting, a baseline run, exports and time axes. Waits are on
conditions, never on fixed sleeps."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PySide6.QtCore import Qt

from tests.workbench.gui.window_helpers import all_ended, inject, load
from workbench.analysis.intervals import percentile_interval


def test_speculation_shows_in_the_batch_plot_and_each_requests_timeline(window, qtbot, tiny_config):
    """n-gram speculation on the tiny model (whose random weights repeat themselves, so lookup
    finds proposals): the batch plot draws proposed and accepted tokens and its title the
    acceptance, and a request's timeline the accepted length of each step."""
    load(window, qtbot, dataclasses.replace(tiny_config, speculative_method="ngram", num_speculative_tokens=3))
    inject(window, 4, 20, 48, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 4, timeout=60_000)
    window.refresh_plots()
    batch = window.plots.plots["batch_composition"]
    proposed = np.nansum(batch.speculation["proposed_tokens"].getData()[1])
    accepted = np.nansum(batch.speculation["accepted_tokens"].getData()[1])
    assert proposed > accepted > 0
    assert "% of proposed tokens accepted, " in batch.plot.titleLabel.text
    right = batch.plot.getAxis("right").labelText  # issue 77 #5: tokens drawn on an axis of sequences
    assert right == "decode seqs; proposed, accepted tokens"
    timelines = [text for row in window.worker.rows() for _, text in row.timeline]
    assert any(text.startswith("decoding; speculation: ") and "accepted per step" in text for text in timelines)


def test_injected_traffic_fills_the_plots_and_the_table(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    inject(window, 6, 20, 8, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 6, timeout=30_000)
    window.refresh_plots()
    window.refresh_tables()
    plots = window.plots.plots
    assert plots["kv_occupancy"].used.getData()[0].size > 0
    assert plots["queue_depth"].curves["running"].getData()[1].max() > 0
    assert plots["latency"].points["ttft"].getData()[0].size == 6
    # The run is whole: its percentiles get their intervals, as report.json computes them.
    ttft = window.worker.store.snapshot().requests["ttft_ms"]
    p99 = percentile_interval(ttft, 99)
    title = plots["latency"].plot.title_text
    # Six requests bound no p99 above: the title says "at least" its lower bound.
    assert "(n=6)<br>95%: p50 " in title and f"/ p99 ≥{p99.low:.0f} ms" in title and p99.high is None
    assert "order statistics of the n requests" in plots["latency"].plot.titleLabel.toolTip()
    assert window.minimumSizeHint().width() <= 1280  # the second line does not widen the window
    assert window.requests.model.rowCount() == 6
    goodput = window.plots.goodput
    assert goodput.text().startswith("goodput ") and "of n=6)" in goodput.text()
    assert goodput.toolTip().startswith(goodput.text())
    assert (
        goodput.sizeHint().width() < 200
        and "rejected, aborted and still unfinished requests count as misses" in goodput.toolTip()
    )


def test_plots_redraw_without_new_data(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    inject(window, 3, 10, 5, "chat")
    qtbot.waitUntil(lambda: len(window.worker.rows()) == 3 and all_ended(window), timeout=30_000)
    window.refresh_plots()
    latency = window.plots.plots["latency"]
    assert latency.points["tpot"].getData()[0] is None or latency.points["tpot"].getData()[0].size == 0
    window.plots.latency_mode.setCurrentIndex(2)  # TPOT, while the engine is idle
    assert latency.points["tpot"].getData()[0].size == 3 and "TPOT p50" in latency.plot.titleLabel.text
    bigger = dataclasses.replace(tiny_config, num_kv_blocks=256)
    load(window, qtbot, bigger)
    window.refresh_plots()  # nothing ran on the new engine: the plots still show its capacity
    assert "1,024 tokens" in window.plots.plots["kv_occupancy"].plot.titleLabel.text
    assert "no request finished yet" in latency.plot.titleLabel.text


def test_hovering_a_latency_point_names_its_request_and_clicking_selects_its_row(window, qtbot, tiny_config):
    from PySide6.QtCore import QPointF
    from PySide6.QtTest import QTest

    window.resize(1480, 960)  # the plots side by side in full (an earlier test may leave an 800-pixel screen)
    load(window, qtbot, tiny_config)
    inject(window, 3, 8, 4, "chat")
    inject(window, 1, 40, 30, "long")  # ends last, far from the others
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 4, timeout=30_000)
    window.tabs.setCurrentWidget(window.memory)
    window.plots.latency_mode.setCurrentIndex(1)  # e2e, where the long request stands highest
    window.refresh_plots()
    latency = window.plots.latency
    x, y = latency.points["e2e"].getData()
    target = int(y.argmax())  # the long request's e2e point
    view = window.plots.layout_widget

    def on_screen():  # where the point is drawn, once the plot has ranged its axes to the data
        return view.mapFromScene(latency.plot.vb.mapViewToScene(QPointF(x[target], y[target])))

    seen = []

    def settled():  # on screen, in range, and where it was at the last look (the window lays out after a frame)
        seen.append(on_screen())
        return (
            len(seen) > 1
            and seen[-1] == seen[-2]
            and view.viewport().rect().contains(seen[-1])
            and latency.plot.vb.viewRect().contains(x[target], y[target])
        )

    qtbot.waitUntil(settled)
    where = on_screen()
    QTest.mouseMove(view.viewport(), where)
    qtbot.waitUntil(lambda: latency.plot.vb.toolTip().startswith("long-3 (long)"), timeout=5_000)
    tip = latency.plot.vb.toolTip()
    assert "prompt 40 tokens, output 30 tokens" in tip and "TTFT" in tip and "e2e" in tip
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=where)
    qtbot.waitUntil(lambda: window.requests.selected_id() == "long-3", timeout=5_000)
    assert window.tabs.currentWidget() is window.requests
    assert window.requests.detail.toPlainText().startswith("long-3 (long) — finished")


def test_a_bench_run_is_drawn_faded_under_the_live_plots_as_a_baseline(window, qtbot, tiny_config, tmp_path):
    from workbench.cli import main

    preset = tmp_path / "baseline.toml"
    preset.write_text(f"""
name = "baseline"
description = "Five chats on the tiny model."
[engine]
model = "{tiny_config.model}"
device = "cpu"
num_kv_blocks = 128
block_size = 4
[traffic]
arrival = "constant"
rate = 50.0
num_requests = 5
prompt_len = {{ kind = "fixed", mean = 12 }}
output_len = {{ kind = "fixed", mean = 6 }}
[slo]
ttft_ms = 1000
""")
    assert main(["bench", "--preset", str(preset), "--out", str(tmp_path / "run"), "--no-plots"]) == 0
    load(window, qtbot, tiny_config)
    window.run_files.open_baseline(str(tmp_path / "run"))
    latency = window.plots.latency.plot
    ghosts = [item for item in latency.vb.addedItems if item.zValue() == -10]
    ghost_points = [item for item in ghosts if item.opts["symbol"] and len(item.getData()[0]) == 5]
    assert len(ghost_points) == 1  # the TTFT of the 5 baseline requests
    assert all(item not in [entry[0] for entry in latency.legend.items] for item in ghosts)
    assert (
        window.plots.baseline_label.text().startswith("baseline (faded): run, TTFT p50")
        and "(n=5)" in window.plots.baseline_label.text()
    )
    assert any(item.zValue() == -10 for item in window.plots.plots["kv_occupancy"].plot.vb.addedItems)
    inject(window, 3, 8, 4, "chat")  # live requests draw over it
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 3, timeout=30_000)
    window.refresh_plots()
    assert window.plots.latency.points["ttft"].getData()[0].size == 3 and "(n=3)" in latency.titleLabel.text
    window.run_files.clear_baseline()
    assert (
        not [item for item in latency.vb.addedItems if item.zValue() == -10]
        and window.plots.baseline_label.text() == ""
    )


def test_each_plot_exports_to_png_svg_and_csv(window, qtbot, tiny_config, tmp_path):
    from PySide6.QtGui import QImage

    load(window, qtbot, tiny_config)
    inject(window, 4, 8, 4, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 4, timeout=30_000)
    window.refresh_plots()
    written = window.run_files.export_plots(str(tmp_path))
    assert len(written) == 15 and all(path.stat().st_size > 0 for path in written)
    assert not QImage(str(tmp_path / "latency.png")).isNull()
    assert "<svg" in (tmp_path / "queue_depth.svg").read_text()
    header, *rows = (tmp_path / "latency.csv").read_text().splitlines()
    # One row per request; e2e's and TPOT's columns are empty while TTFT is shown.
    assert header.startswith("TTFT_x,TTFT_y,E2E_x,E2E_y,TPOT_x,TPOT_y,p50 of last 100_x") and len(rows) == 4
    ttft_x = sorted(float(row.split(",")[0]) for row in rows)
    assert ttft_x == pytest.approx(sorted(window.plots.latency.points["ttft"].getData()[0].tolist()))
    assert window.run_files.export_plots(str(tmp_path / "missing" / "folder")) == []
    assert "export plots:" in window.error_label.text()


def test_time_axes_show_the_whole_run_or_follow_its_last_seconds(qtbot):
    import numpy as np

    from engine.requests.metrics import RequestMetrics, StepStats
    from workbench.gui.plots_view import PlotsView
    from workbench.live.metrics_store import MetricsStore

    store = MetricsStore(0.0, kv_capacity_tokens=1024)
    for index in range(600):  # a 60-second run
        store.add_step(StepStats(index * 0.1 + 0.1, 0.1, 8, 4, 4, 10, 100, 0, 0, 0, 4, 0, 0, 0, 0))
    store.add_request(RequestMetrics(1.0, 10, 1.0, 1.2, 2.0, [1.2, 2.0], finish_reason="length"), "chat", "chat-0")
    store.add_request(
        RequestMetrics(58.0, 10, 58.0, 58.5, 59.0, [58.5, 59.0], finish_reason="length"), "chat", "chat-1"
    )
    view = PlotsView()
    qtbot.addWidget(view)
    view.resize(1200, 800)
    view.show()
    view.update_from(store.snapshot())
    for plot in view.plots.values():
        plot.plot.vb.updateAutoRange()
    whole = {name: plot.plot.vb.viewRange()[0] for name, plot in view.plots.items()}
    assert all(low <= 1.0 and high >= 59.0 for low, high in whole.values()), whole  # the first request stays in view
    view.follow_seconds.setValue(10)
    view.follow.setChecked(True)
    assert all(np.allclose(plot.plot.vb.viewRange()[0], [50.0, 60.0]) for plot in view.plots.values())
    view.follow.setChecked(False)
    assert all(
        np.allclose(plot.plot.vb.viewRange()[0], [0.0, 65.0]) for plot in view.plots.values()
    )  # a step past 60 s
    # Zooming one plot zooms them all, and the lines are drawn at full resolution within it.
    throughput = view.plots["throughput"].plot.vb
    throughput.setXRange(10.05, 12.05, padding=0)
    throughput.sigRangeChangedManually.emit([True, False])
    assert all(np.allclose(plot.plot.vb.viewRange()[0], [10.05, 12.05]) for plot in view.plots.values())
    x, _ = view.plots["kv_occupancy"].used.getData()
    # Every step inside and one either side; the line starts where its first step started.
    assert x.size == 23 and x[0] == pytest.approx(x[1] - 0.1) and x[1] < 10.05 < x[2] and x[-2] < 12.05 < x[-1]
    store.add_step(StepStats(60.1, 0.1, 8, 4, 4, 10, 100, 0, 0, 0, 4, 0, 0, 0, 0))
    view.update_from(store.snapshot())
    assert np.allclose(throughput.viewRange()[0], [10.05, 12.05])  # new data leaves the user's zoom alone
    throughput.enableAutoRange(x=True)  # pyqtgraph's "A" button: the whole run again
    view.redraw()
    assert all(np.allclose(plot.plot.vb.viewRange()[0], [0.0, 65.0]) for plot in view.plots.values())
    assert view.plots["latency"].plot.vb.viewRange()[0][0] <= 1.0
    # Zooming while following stops following and keeps the zoom (it once jumped to the whole run).
    view.follow.setChecked(True)
    throughput.setXRange(52.05, 55.05, padding=0)
    throughput.sigRangeChangedManually.emit([True, False])
    assert not view.follow.isChecked() and view.zoomed
    assert all(np.allclose(plot.plot.vb.viewRange()[0], [52.05, 55.05]) for plot in view.plots.values())
