"""The Why tab and the Sweep view on constructed runs: an opened run's tail explained with the
cause that binds, a click on its segment showing a request's history, and a sweep's point opening
its run."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt

from engine import EngineConfig
from workbench.bench.headless import run_headless
from workbench.cli import main
from workbench.traffic.scenario import SLO, Scenario, ScenarioEvent

SIMULATED = "simulated:llama-3-8b@a100-80gb"


def slot_bound_run(folder):
    """Eight requests at once, two slots: only max_num_seqs makes anyone wait."""
    scenario = Scenario(
        name="slots",
        engine=EngineConfig(model=SIMULATED, max_num_seqs=2, long_prompt_threshold=0),
        traffic=None,
        events=[ScenarioEvent(at_s=0.0, action="inject", count=8, prompt_tokens=64, output_tokens=16, tag="chat")],
        slo=SLO(ttft_ms=60_000),
    )
    run_headless(scenario, folder)


def test_an_opened_run_is_explained_and_a_click_on_the_tails_cause_shows_a_history(window, qtbot, tmp_path):
    slot_bound_run(tmp_path)
    window.open_run(str(tmp_path))
    why = window.why
    assert why.explanation is not None and why.explanation.everyone.n == 8
    causes = [cause for _, _, cause in why._segments]
    assert "max_num_seqs" in causes and "kv_blocks" not in causes
    # A real click in the middle of the tail bar's max_num_seqs segment, at a laptop's window size.
    window.resize(1280, 800)
    window.tabs.setCurrentWidget(why)
    qtbot.waitExposed(why.plot_widget)
    qtbot.wait(50)  # laid out at its shown size
    start, end, _ = next(segment for segment in why._segments if segment[2] == "max_num_seqs")
    scene_point = why.plot.vb.mapViewToScene(QPointF((start + end) / 2, 1.0))
    view_point = why.plot_widget.mapFromScene(scene_point)
    qtbot.mouseClick(why.plot_widget.viewport(), Qt.MouseButton.LeftButton, pos=view_point)
    history = why.detail.toPlainText()
    # Beside the list, the history has the tab's height: it was 4 lines under the list at 1280x800.
    assert why.detail.height() >= 8 * why.detail.fontMetrics().lineSpacing() and why.slowest.wordWrap()
    assert "waiting for a sequence slot (max_num_seqs)" in history
    assert "waited at the head of waiting: max_num_seqs (2) reached" in history
    assert window.session.selected_request == history.split(":", 1)[0]


def test_the_current_run_is_explained_from_its_log(window, qtbot, tmp_path):
    slot_bound_run(tmp_path)
    window.worker.run_folder = tmp_path  # as if the window had made the run there
    window.why.explain_requested.emit(50.0)
    assert window.why.explanation.above_percentile == 50.0 and window.why.slowest.count() == 5


def test_a_sweeps_point_opens_its_run(window, tmp_path):
    code = main(
        ["sweep", "--preset", "chat-steady", "--set", f"engine.model={SIMULATED}", "--set", "traffic.num_requests=20"]
        + ["--vary", "engine.max_num_seqs=1,8", "--no-plots", "--out", str(tmp_path)]
    )
    assert code == 0 and window.sweep_view.open(str(tmp_path))
    chart = window.sweep_view.plots["throughput_vs_latency"]
    curves = [curve for curve in chart.listDataItems() if hasattr(curve, "sweep_rows")]
    assert sum(len(curve.sweep_rows) for curve in curves) == 2
    # Issue 78: simulated points say what their axes' figures are worth where each stood: the
    # defaults (auto: vLLM V1) at one sequence a step and at a full batch of 1, which no
    # published run checks.
    for load in ("light", "saturated"):
        assert f"simulated (vllm-0.8, {load} load):<br>x unchecked, y unchecked" in chart.titleLabel.text
    window.sweep_view.open_point(curves[0].sweep_rows[1])
    assert window.session.viewing_past_run and window.tabs.currentWidget() is window.why
    # Which settings the opened point had: it never said.
    assert window.plots.source_label.text() == "showing point-02: max_num_seqs=8 (Back to live returns)"
    assert "opened point-02 (max_num_seqs=8)" in window.sweep_view.caption.text()
    assert window.why.explanation.everyone.n == 20
    assert not window.sweep_view.open(str(tmp_path / "nowhere")) and "no sweep here" in window.sweep_view.caption.text()


def test_a_cause_a_pixel_wide_can_be_clicked_and_wide_ones_still_can(qtbot):
    """Causes under about 1% of the tail bar were 1-pixel segments nobody could click."""
    from workbench.gui.why_view import WhyView

    why = WhyView()
    qtbot.addWidget(why)
    why._segments = [(0.0, 60.0, "prefill"), (60.0, 60.4, "kv_blocks"), (60.4, 100.0, "decode")]
    pixel = 0.25  # percent of the bar per pixel: a 400-pixel bar
    assert why.cause_at(60.2, pixel) == "kv_blocks"  # on it
    assert why.cause_at(59.5, pixel) == "kv_blocks" and why.cause_at(61.2, pixel) == "kv_blocks"  # 2-3 px off
    assert why.cause_at(30.0, pixel) == "prefill" and why.cause_at(80.0, pixel) == "decode"
    assert why.cause_at(101.5, pixel) is None  # past the bar's end and its reach


def test_a_rate_searchs_target_and_each_goodputs_n_are_in_the_window(window, tmp_path):
    """The goodput points had no n, and a --find-max-rate sweep's target line was missing."""
    code = main(
        ["sweep", "--preset", "chat-steady", "--set", f"engine.model={SIMULATED}", "--set", "traffic.num_requests=20"]
        + ["--find-max-rate", "--goodput-target", "80", "--tolerance", "0.5", "--no-plots", "--out", str(tmp_path)]
    )
    assert code == 0 and window.sweep_view.open(str(tmp_path))
    chart = window.sweep_view.plots["goodput_vs_rate"]
    targets = [item for item in chart.items if isinstance(item, pg.InfiniteLine)]
    assert [line.value() for line in targets] == [80.0] and targets[0].label.format == "target 80%"
    labels = [item.textItem.toPlainText() for item in chart.items if isinstance(item, pg.TextItem)]
    assert labels and all(label == "n=20" for label in labels)


def test_both_sweep_charts_and_their_titles_are_on_screen_at_800_by_600(window, qtbot, tmp_path):
    """Issue 58 #5: the second chart sat off screen, and the first one's one-line title was cut."""
    code = main(
        ["sweep", "--preset", "chat-steady", "--set", f"engine.model={SIMULATED}", "--set", "traffic.num_requests=20"]
        + ["--find-max-rate", "--goodput-target", "80", "--tolerance", "0.5", "--no-plots", "--out", str(tmp_path)]
    )
    assert code == 0 and window.sweep_view.open(str(tmp_path))
    window.views.setCurrentWidget(window.sweep_view)
    for width, height in ((800, 600), (1280, 800)):
        window.resize(width, height)
        qtbot.waitUntil(lambda: window.width() == width, timeout=5_000)  # noqa: B023
        qtbot.wait(50)
        charts = window.sweep_view.charts
        assert len(window.sweep_view.plots) == 2
        for plot in window.sweep_view.plots.values():
            box = plot.sceneBoundingRect()
            assert box.left() >= 0 and box.right() <= charts.width() and box.bottom() <= charts.height()
            assert plot.titleLabel.item.boundingRect().width() <= box.width()
