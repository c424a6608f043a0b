"""The Arms tab: a preset's two arms run by a real `workbench bench` process and shown side by side."""

from __future__ import annotations

from pathlib import Path

from tests.workbench.tiny_runs import arms_preset
from workbench.gui.arms_view import VERDICT_COLOURS
from workbench.runs.run_folder import runs_home


def test_run_both_arms_shows_them_side_by_side_with_the_verdict(window, qtbot, tmp_path, tiny_llama):
    directory, _ = tiny_llama
    arms = window.arms
    out = tmp_path / "arms"
    # Before any arms: no table with Qt's "1 2 3 4" for headers.
    assert arms.table.isHidden() and arms.table.horizontalHeaderItem(1).text() == "baseline"
    arms.preset.addItem("tiny-arms")  # as if it were one of the presets listed
    with qtbot.waitSignal(arms.finished, timeout=240_000) as ended:
        arms.run_arms(arms_preset(tmp_path, directory), out)
        assert not arms.run_button.isEnabled() and str(out) in arms.status.text()
    assert ended.args == [True]
    # The chooser names the arms shown: Run both arms kept its first entry, another preset.
    assert arms.preset.currentText() == "tiny-arms" and not arms.table.isHidden()
    table = arms.table
    header = [table.horizontalHeaderItem(column).text() for column in range(table.columnCount())]
    assert header == ["", "baseline: plain", "candidate: int8", "change"]
    rows = {
        table.item(row, 0).text(): [table.item(row, column).text() for column in (1, 2, 3)]
        for row in range(table.rowCount())
    }
    assert rows["TPOT p50 (ms/token)"][0].endswith("(n=6)") and rows["KV capacity (tokens)"][2] == "+100.0%"
    assert "% [95% " in rows["TPOT p50 (ms/token)"][2]  # issue 48 #2: the change with its interval
    assert arms.kv_why.text().startswith("KV capacity: ") and "bfloat16 (engine.kv_cache_dtype)" in arms.kv_why.text()
    assert (
        arms.verdict.text().startswith("verdict: inconclusive: undecided: goodput_perc:+10 (one pair of runs")
        and "#f39c12" in arms.verdict.styleSheet()
    )
    assert arms.run_button.isEnabled()


def test_repeated_arms_show_means_over_the_repeats_and_a_verdict_on_them(window, qtbot, tmp_path, tiny_llama):
    directory, _ = tiny_llama
    arms = window.arms
    arms.repeats.setValue(2)
    with qtbot.waitSignal(arms.finished, timeout=240_000) as ended:
        arms.run_arms(arms_preset(tmp_path, directory), tmp_path / "arms")
        assert "2 times each, interleaved" in arms.status.text()
    assert ended.args == [True]
    assert sorted(path.name for path in (tmp_path / "arms").iterdir() if path.is_dir()) == ["repeat-1", "repeat-2"]
    tpot = next(row for row in range(arms.table.rowCount()) if arms.table.item(row, 0).text().startswith("TPOT p50"))
    assert arms.table.item(tpot, 1).text().endswith("(n=12, mean of 2 runs)")
    assert "% [95% " in arms.table.item(tpot, 3).text()  # the change with the decision record's interval
    assert "2 repeats (figures: means over them)" in arms.status.text()
    assert "2 pairs of runs" in arms.checks.text()
    word = arms.verdict.text().removeprefix("verdict: ").split(":")[0]
    assert word in ("accept", "reject", "inconclusive") and VERDICT_COLOURS[word] in arms.verdict.styleSheet()


def test_the_arms_run_alone_into_a_run_folder_that_closing_keeps(window, qtbot, tmp_path, tiny_llama):
    """Issue 58 #5: Arms on azure-conv ran its four variants (about 40 minutes) and showed two, in a
    temporary folder that each run left behind (145 MB). It runs the two arms it shows, into a run
    folder beside the window's runs, which closing mid-run keeps."""
    directory, _ = tiny_llama
    preset = Path(arms_preset(tmp_path, directory))
    preset.write_text(preset.read_text() + '\n[variants.unshown]\nengine = { quantization = "int4" }\n')
    arms = window.arms
    with qtbot.waitSignal(arms.finished, timeout=240_000) as ended:
        arms.run_arms(str(preset))
    assert ended.args == [True]
    out = arms._out
    assert out.parent == runs_home() and out.name.endswith("-arms-arms")
    assert sorted(path.name for path in out.iterdir() if path.is_dir()) == ["int8", "plain"]
    arms.run_arms(str(preset))
    second = arms._out
    qtbot.waitUntil(lambda: any(second.iterdir()), timeout=60_000)
    arms.stop()  # what closing the window does
    assert second != out and second.is_dir() and out.is_dir()


def test_a_failed_bench_says_what_it_said_last(window, qtbot, tmp_path):
    with qtbot.waitSignal(window.arms.finished, timeout=120_000) as ended:
        window.arms.run_arms("no-such-preset", tmp_path / "arms")
    assert ended.args == [False]
    assert "workbench bench exited 2" in window.arms.status.text() and "no-such-preset" in window.arms.status.text()


def test_opening_a_folder_without_arms_is_a_message(window, tmp_path):
    assert window.arms.show_arms(tmp_path) is None
    assert "expected a sub-folder per variant" in window.arms.status.text()


def test_the_arms_wait_for_the_windows_own_traffic_to_end(window, qtbot, tiny_config):
    """Run while the window's engine serves: the arms would share the cores and skew the comparison."""
    from tests.workbench.gui.window_helpers import inject, load

    load(window, qtbot, tiny_config)
    inject(window, 40, 20, 60, "chat")
    qtbot.waitUntil(lambda: not window.worker.at_rest(), timeout=10_000)
    started = []
    window.arms.run_arms = lambda preset, *rest: started.append(preset)
    window.arms.run_requested.emit("int4-vs-none")
    assert window.views.currentWidget() is window.arms and not started
    assert window.arms.status.text().startswith("waiting for the window's engine before running int4-vs-none's arms")
    qtbot.waitUntil(lambda: started == ["int4-vs-none"], timeout=120_000)
    assert window.worker.at_rest()
