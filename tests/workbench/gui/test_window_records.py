"""What a window run records is what ran (issue 77 #1): Start's traffic comes from the traffic
panel, whose scenario carries the default engine; the run log and report.json name the engine
loaded, setting for setting, and `workbench replay` of the run re-runs that engine."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from engine import EngineConfig
from tests.workbench.gui.window_helpers import all_ended, load
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
    window.close()  # the run ends with its report files

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
