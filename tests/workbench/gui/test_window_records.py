"""What a window run records is what ran (issue 77 #1): Start's traffic comes from the traffic
panel, whose scenario carries the default engine; the run log and report.json name the engine
loaded, setting for setting, and `workbench replay` of the run re-runs that engine."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from engine import EngineConfig
from tests.workbench.gui.window_helpers import all_ended, inject, load, save_run
from workbench.cli import main
from workbench.runs.run_log import read_run_log

SIMULATED_WITH_SETTINGS = EngineConfig(
    model="simulated:llama-3-8b@h100-80gb",
    kv_cache_dtype="int8",
    speculative_method="draft",
    max_num_seqs=16,
    compile_decode="off",  # a simulated GPU's load says so: nothing to compile
    simulation_speed=1.0,  # the window's pace: the simulated clock at wall-clock speed
)


def test_a_window_run_records_the_loaded_engine_and_replays_on_it(window, qtbot, tmp_path):
    load(window, qtbot, SIMULATED_WITH_SETTINGS)
    window.traffic_panel.num_requests.setValue(24)
    window.traffic_panel.rate.setValue(40.0)
    window.start_traffic(window.traffic_panel.scenario())
    qtbot.waitUntil(lambda: window.worker.run_folder is not None, timeout=30_000)
    folder = window.worker.run_folder
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished" and all_ended(window), timeout=60_000)
    # Issue 77 #5: the report files came only with the next run or the window's close.
    qtbot.waitUntil(lambda: (folder / "report.json").exists(), timeout=10_000)

    recorded = read_run_log(folder / "run.jsonl").header["scenario"]["engine"]
    assert recorded == dataclasses.asdict(SIMULATED_WITH_SETTINGS)
    report = json.loads((folder / "report.json").read_text())
    assert report["scenario"]["engine"] == recorded

    replayed = tmp_path / "replayed"
    assert main(["replay", str(folder), "--out", str(replayed), "--no-plots"]) == 0
    assert read_run_log(replayed / "run.jsonl").header["scenario"]["engine"] == recorded
    rows = list(csv.DictReader((replayed / "per_request.csv").open()))
    assert len(rows) == 24
    for row in rows:  # a simulated GPU's clock: the same engine and requests give the same times
        assert float(row["replay_ttft_ms"]) == pytest.approx(float(row["original_ttft_ms"]), rel=1e-6, abs=1e-3)
        assert float(row["replay_e2e_ms"]) == pytest.approx(float(row["original_e2e_ms"]), rel=1e-6, abs=1e-3)


def test_after_a_finished_run_an_injection_is_a_run_of_its_own_and_save_run_copies_the_whole_log(
    window, qtbot, tmp_path
):
    load(window, qtbot, SIMULATED_WITH_SETTINGS)
    window.traffic_panel.num_requests.setValue(6)
    window.start_traffic(window.traffic_panel.scenario())
    qtbot.waitUntil(lambda: window.worker.run_folder is not None, timeout=30_000)
    finished = window.worker.run_folder
    qtbot.waitUntil(lambda: (finished / "report.json").exists() and all_ended(window), timeout=60_000)
    report = (finished / "report.json").read_bytes()
    saved = save_run(window, qtbot, tmp_path / "saved")
    log = read_run_log(saved / "run.jsonl")
    assert log.complete and len(log.requests) == 6 and log.footer["stopped_by"] is None
    inject(window, 2, 20, 8, "chat")
    qtbot.waitUntil(lambda: window.worker.run_folder != finished and all_ended(window), timeout=30_000)
    assert len(window.worker.rows()) == 2 and window.worker.store.requests_sent == 2
    assert (finished / "report.json").read_bytes() == report  # the finished run, as it was
