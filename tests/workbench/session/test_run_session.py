"""One run session for every driver (issue 79 #1): the window's engine loop and a headless run open,
record, finish and report a run the same way, so the same traffic on the same engine leaves the same
run log through either; and a headless run whose engine breaks still leaves its report."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest

from engine import EngineConfig
from engine.core import EngineBroken
from engine.llm_engine import LLMEngine
from workbench.backends.local import LocalBackend
from workbench.bench.headless import run_headless
from workbench.live.engine_loop import EngineEvents, EngineLoop
from workbench.runs.run_log import read_run_log
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import Scenario

# A simulated GPU at a set speed: the window keeps the configuration as it is (it would make a speed
# of 0 real time), and the engine's clock is the simulation's, so both runs see the same times.
CONFIG = EngineConfig(model="simulated:llama-3-8b@a100-80gb", max_model_len=2048, simulation_speed=1e6)
SCENARIO = Scenario(
    name="same-run",
    engine=CONFIG,
    seed=7,
    traffic=TrafficProfile(
        arrival="poisson",
        rate=30.0,
        num_requests=24,
        prompt_len=LengthDistribution(kind="lognormal", mean=300, std=0.6),
        output_len=LengthDistribution(kind="lognormal", mean=40, std=0.5),
    ),
)


def _records(log_path) -> list[dict]:
    return [json.loads(line) for line in log_path.read_text().splitlines()]


def _run_in_the_window_loop(runs_dir):
    """SCENARIO through the window's engine loop: loaded, started, run to its end, closed."""
    loaded, finished, failed = threading.Event(), threading.Event(), []
    events = EngineEvents(
        lambda stage, fraction: None,
        lambda info: loaded.set(),
        failed.append,
        lambda state: finished.set() if state == "finished" else None,
    )
    loop = EngineLoop(events, runs_dir=runs_dir)
    loop.start()
    try:
        loop.load(CONFIG)
        assert loaded.wait(60) and not failed
        # As the traffic panel sends it: its scenario carries the default engine, not the one loaded.
        loop.start_traffic(dataclasses.replace(SCENARIO, engine=EngineConfig()))
        assert finished.wait(120) and not failed
    finally:
        assert loop.shutdown(60)
    (folder,) = [path for path in runs_dir.iterdir() if path.is_dir()]
    return folder


def test_the_same_run_through_the_window_and_headless_leaves_the_same_log(tmp_path):
    window_folder = _run_in_the_window_loop(tmp_path / "window-runs")
    headless_folder = tmp_path / "headless"
    run_headless(SCENARIO, headless_folder)

    window, headless = _records(window_folder / "run.jsonl"), _records(headless_folder / "run.jsonl")
    kinds = [record["type"] for record in headless]
    assert kinds[0] == "header" and kinds[-1] == "footer" and kinds.count("request") == 24
    assert window == headless
    for folder in (window_folder, headless_folder):
        report = json.loads((folder / "report.json").read_text())
        assert report["complete"] and report["metrics"]["requests_finished"]["value"] == 24
        assert not (folder / ".writing.lock").exists()


def test_a_headless_run_whose_engine_breaks_still_writes_its_report(tmp_path, monkeypatch):
    """Issue 79: an engine that broke beyond recovery (EngineBroken) ended `bench` with no report
    files. The run's log is closed without a footer, and its report says the run is incomplete."""
    backend = LocalBackend(LLMEngine(CONFIG))
    advance, steps = backend.advance, []

    def breaks_on_the_fifth_step(until=None):
        steps.append(None)
        if len(steps) == 5:
            raise EngineBroken("planted: the step failed and ending its requests failed too", [])
        return advance(until)

    monkeypatch.setattr(backend, "advance", breaks_on_the_fifth_step)
    with pytest.raises(EngineBroken, match="planted"):
        run_headless(SCENARIO, tmp_path, backend=backend)
    log = read_run_log(tmp_path / "run.jsonl")
    report = json.loads((tmp_path / "report.json").read_text())
    assert log.footer is None and not report["complete"]
    assert len(log.steps) == 4
    assert not (tmp_path / ".writing.lock").exists()
