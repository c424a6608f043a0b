"""The window with a real worker thread and a tiny model (pytest-qt, offscreen): the Runs tab: opening,
saving, comparing runs and going back to live. Waits are on conditions, never on fixed sleeps."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from PySide6.QtCore import Qt, QTimer

from tests.workbench.gui.window_helpers import all_ended, load, save_run
from tests.workbench.tiny_runs import tiny_scenario
from workbench.bench.headless import run_headless
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import SLO, Scenario


def test_opening_a_run_with_a_damaged_line_shows_the_rest_and_names_the_line(window, tmp_path, tiny_llama):
    """It used to end in a UnicodeDecodeError traceback from read_run_log."""
    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory), tmp_path)
    lines = (tmp_path / RUN_LOG_NAME).read_bytes().splitlines(keepends=True)
    lines[3] = b"\xff\xfe damaged on disk\n"
    (tmp_path / RUN_LOG_NAME).write_bytes(b"".join(lines))
    window.open_run(str(tmp_path))
    assert window.error_label.text() == ""
    # As report.json says: a skipped line makes the run incomplete, and the window says so too.
    assert window.runs.text.toPlainText().startswith(f"viewing {tmp_path} (incomplete: run.jsonl: 1 line skipped")
    assert "1 line skipped (line 4: not UTF-8 (byte 1))" in window.runs.text.toPlainText()


def why_source(window) -> str:
    """The run the Why tab explains, as its chart's title names it."""
    return window.why.plot.titleLabel.text.partition(":")[0]


def rewrite_header(folder, change) -> None:
    """Apply `change` to the run log's header line in place."""
    lines = (folder / RUN_LOG_NAME).read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    change(header)
    lines[0] = json.dumps(header) + "\n"
    (folder / RUN_LOG_NAME).write_text("".join(lines))


def test_a_run_whose_header_lacks_the_cache_size_opens_without_its_step_traces(window, tmp_path, tiny_llama):
    """It raised KeyError in past_traces, with no message, after the plots had switched to it."""
    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory), tmp_path)
    rewrite_header(tmp_path, lambda header: header["engine"].pop("kv_blocks"))
    window.open_run(str(tmp_path))
    assert window.error_label.text() == "" and window.session.viewing_past_run
    assert window.plots.source_label.text() == f"showing {tmp_path.name} (Back to live returns)"
    said = "its step traces cannot be shown: the header's engine.kv_blocks (the cache's size in blocks) is missing"
    assert said in window.runs.text.toPlainText()
    # all panes on the opened run
    assert window.session.opened.past.store is None and why_source(window) == tmp_path.name


def test_a_run_that_cannot_be_shown_switches_nothing(window, tmp_path, tiny_llama, monkeypatch):
    directory, _ = tiny_llama
    shown, broken = tmp_path / "shown", tmp_path / "broken"
    run_headless(tiny_scenario(directory), shown)
    run_headless(tiny_scenario(directory), broken)
    window.open_run(str(shown))
    monkeypatch.setattr("workbench.live.window_session.explain", lambda *_: {}["a field this log lacks"])
    window.open_run(str(broken))
    assert (
        "open run: " in window.error_label.text() and "its log cannot be shown (KeyError" in window.error_label.text()
    )
    assert window.plots.source_label.text() == "showing shown (Back to live returns)" and why_source(window) == "shown"


def test_back_to_live_leaves_no_pane_describing_the_opened_run(window, qtbot, tiny_config, tmp_path, tiny_llama):
    """The Runs text and the Why tab kept describing the opened run, and a click in the Why tab
    marked the live run's request of the same id."""
    from workbench.gui.why_view import NOTHING_EXPLAINED

    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory), tmp_path)
    load(window, qtbot, tiny_config)
    window.open_run(str(tmp_path))
    assert window.why.slowest.count() > 0 and window.runs.text.toPlainText().startswith("viewing")
    window.why.show_history(window.why.slowest.item(0).data(Qt.ItemDataRole.UserRole))
    window.back_to_live()
    assert window.runs.text.toPlainText() == "back to the live run"
    assert window.why.summary.text() == NOTHING_EXPLAINED and window.why.slowest.count() == 0
    assert window.why.explanation is None and window.session.selected_request is None


def test_saved_run_can_be_opened_and_compared(window, qtbot, tiny_config, tmp_path):
    load(window, qtbot, tiny_config)
    traffic = TrafficProfile(
        arrival="poisson",
        rate=200.0,
        num_requests=8,
        prompt_len=LengthDistribution(mean=12),
        output_len=LengthDistribution(mean=6),
    )
    window.start_traffic(Scenario(name="t", traffic=traffic, slo=SLO(ttft_ms=5000)))
    qtbot.waitUntil(lambda: len(window.worker.rows()) == 8 and all_ended(window), timeout=30_000)
    first = save_run(window, qtbot, tmp_path / "first")
    assert (first / "latency.png").exists()
    report = json.loads((first / "report.json").read_text())
    assert (
        report["complete"] and report["metrics"]["requests_finished"]["value"] == 8
    )  # every request ended: a whole run
    assert read_run_log(first / "run.jsonl").complete
    window.open_run(str(first))
    assert window.session.viewing_past_run and "viewing" in window.runs.text.toPlainText()
    window.compare_runs(str(first), str(first))
    assert (
        "verdict: no decision: no intended gain or tolerated regression was declared" in window.runs.text.toPlainText()
    )


def test_save_run_leaves_the_window_responsive_and_says_each_stage(window, qtbot, tiny_config, tmp_path, monkeypatch):
    """Issue 77 #4: Save run… froze the window 18-31 s (a 2,000-request run). The save's thread
    here waits until the GUI thread has run a timer: were the save on the GUI thread, the timer
    could not fire and the wait would end by its timeout, unmet."""
    load(window, qtbot, tiny_config)
    traffic = TrafficProfile(arrival="poisson", rate=200.0, num_requests=4, prompt_len=LengthDistribution(mean=8))
    window.start_traffic(Scenario(name="t", traffic=traffic))
    qtbot.waitUntil(lambda: len(window.worker.rows()) == 4 and all_ended(window), timeout=30_000)
    gui_ran, seen = threading.Event(), {}
    write_copy = window.worker.save_log_copy

    def slow_copy(path):
        seen["waited"] = gui_ran.wait(timeout=30)
        write_copy(path)

    monkeypatch.setattr(window.worker, "save_log_copy", slow_copy)
    QTimer.singleShot(50, gui_ran.set)
    target = window.run_files.save_run(str(tmp_path / "saved"))
    assert window.runs.text.toPlainText().startswith(f"saving the run into {target}")
    qtbot.waitUntil(lambda: window.run_files.last_saved == target, timeout=60_000)
    assert seen["waited"] and (target / "latency.png").exists()
    text = window.runs.text.toPlainText()
    assert text.startswith(f"saved to {target} (run.jsonl, report.json, ") and "ttft_p50_ms" in text
    assert '"value"' not in text  # issue 77 #6: the summary lines, not the metrics' raw JSON


def forty_chats(output_len: LengthDistribution) -> TrafficProfile:
    """40 short prompts at 20 req/s, for a run saved while it goes."""
    return TrafficProfile(
        arrival="constant", rate=20.0, num_requests=40, prompt_len=LengthDistribution(mean=12), output_len=output_len
    )


def test_a_run_saved_mid_run_says_what_was_in_flight_and_what_was_still_to_send(window, qtbot, tiny_config, tmp_path):
    """It reported every planned request as "never sent", none unfinished, and a crash."""
    load(window, qtbot, tiny_config)
    traffic = forty_chats(LengthDistribution(kind="fixed", mean=400))  # long outputs: still running when saved
    window.start_traffic(Scenario(name="t", traffic=traffic))
    qtbot.waitUntil(lambda: window.worker.requests_in_flight() >= 3, timeout=30_000)
    saved = save_run(window, qtbot, tmp_path / "mid")
    report = json.loads((saved / "report.json").read_text())
    metrics = report["metrics"]
    sent = metrics["requests_finished"]["value"] + metrics["requests_unfinished"]["value"]
    assert metrics["requests_unfinished"]["value"] >= 3
    assert sent + metrics["requests_not_sent"]["value"] == 40 and report["requests_planned"] == 40
    assert "the run log was not closed (crash or interruption)" not in report["incomplete_because"]
    assert "saved while the run was going (requests in flight or still to send)" in report["incomplete_because"]
    assert any(
        reason.startswith("requests still in flight when the run ended: ") for reason in report["incomplete_because"]
    )
    window.worker.stop_traffic()


def test_the_window_and_report_json_give_the_same_figures_for_a_run_saved_mid_run_live_and_opened(
    window, qtbot, tiny_config, tmp_path, monkeypatch
):
    """The window's goodput counted ended requests (100.0% of n = 114) while the report counted
    arrived ones (77.0% of 139); the opened run said "(complete)" and its TTFT percentiles counted
    unfinished requests."""
    load(window, qtbot, tiny_config)
    traffic = forty_chats(LengthDistribution(kind="uniform", low=2, high=300))  # some end, some run on
    window.start_traffic(Scenario(name="t", traffic=traffic, slo=SLO(ttft_ms=5000)))
    finished = lambda: sum(row.state == "finished" for row in window.worker.rows())  # noqa: E731
    qtbot.waitUntil(lambda: finished() >= 3 and window.worker.requests_in_flight() >= 3, timeout=60_000)
    live = {}
    write = window.worker._write_log_copy

    def write_and_read_the_window(path):  # on the worker thread: no step comes between the two
        write(path)
        live["snapshot"] = window.worker.store.snapshot()

    monkeypatch.setattr(window.worker, "_write_log_copy", write_and_read_the_window)
    saved = save_run(window, qtbot, tmp_path / "mid")
    window.worker.stop_traffic()
    report = json.loads((saved / "report.json").read_text())
    metrics = report["metrics"]
    goodput = (metrics["requests_meeting_slo"]["value"], metrics["goodput_perc"]["n"])
    ttft = metrics["ttft_p50_ms"]
    assert not report["complete"] and goodput[1] > ttft["n"]  # requests in flight: arrived, not finished
    # What the window draws from the store at the moment the run was saved (its frames come at
    # 20 Hz, so the last one drawn may be a step behind the saved log).
    window.plots.update_from(live["snapshot"])

    def shown_as_in_the_report():
        snapshot = window.plots.snapshot
        assert snapshot.goodput == goodput
        assert window.plots.goodput.text() == (
            f"goodput {metrics['goodput_perc']['value']:.1f}% ({goodput[0]} of n={goodput[1]})"
        )
        values = snapshot.finished_latencies("ttft")
        assert values.size == ttft["n"] and float(np.percentile(values, 50)) == pytest.approx(ttft["value"])
        title = window.plots.latency.plot.title_text
        assert f"(n={ttft['n']}" in title and "<br>" not in title  # no intervals: the run is not whole

    shown_as_in_the_report()
    window.open_run(str(saved))
    opened = window.plots.snapshot
    assert opened.goodput == goodput and opened.finished_latencies("ttft").size == ttft["n"]
    assert (
        window.plots.goodput.text()
        == f"goodput {metrics['goodput_perc']['value']:.1f}% ({goodput[0]} of n={goodput[1]})"
    )
    assert (
        f"(n={ttft['n']}" in window.plots.latency.plot.title_text and "<br>" not in window.plots.latency.plot.title_text
    )
    status = window.runs.text.toPlainText()
    assert "(incomplete: " in status and "saved while the run was going" in status and "(complete)" not in status
    assert f"{ttft['n']} finished of {goodput[1]} arrived" in status


def test_runs_tab_errors_are_messages(window, qtbot, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "run.jsonl").write_text("not json at all\n")
    for folder, message in (
        (tmp_path / "empty", "no run log here"),
        (tmp_path / "missing", "no run log here"),
        (tmp_path / "garbage", "not a workbench run log"),
    ):
        window.open_run(str(folder))
        assert window.error_label.text().startswith("open run: ") and message in window.error_label.text(), folder
    assert not window.session.viewing_past_run
    assert save_run(window, qtbot, tmp_path / "nothing-yet") is None  # no engine loaded: no run log yet
    assert window.error_label.text().startswith("save run: ")


def test_start_after_opening_a_run_shows_the_new_run_and_says_which_run_the_plots_show(
    window, qtbot, tiny_config, tmp_path, tiny_llama
):
    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory), tmp_path)
    load(window, qtbot, tiny_config)
    window.open_run(str(tmp_path))
    assert window.plots.source_label.text() == f"showing {tmp_path.name} (Back to live returns)"
    window.start_traffic(Scenario(name="t", traffic=TrafficProfile(arrival="constant", rate=50.0, num_requests=2)))
    assert not window.session.viewing_past_run and window.plots.source_label.text() == ""
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished", timeout=30_000)
    window.refresh_plots()
    assert window.plots.snapshot.requests["ttft_ms"].size == 2  # the live run, not the opened one


def test_compare_runs_shows_the_comparison_in_the_runs_tab(window, tmp_path, tiny_llama):
    """After the Step tab was inserted, Compare runs… switched to the Memory tab by its old index."""
    directory, _ = tiny_llama
    for name in ("a", "b"):
        run_headless(tiny_scenario(directory), tmp_path / name)
    window.compare_runs(str(tmp_path / "a"), str(tmp_path / "b"))
    assert window.tabs.currentWidget() is window.runs
    assert "verdict:" in window.runs.text.toPlainText()
