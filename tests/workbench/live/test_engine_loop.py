"""The engine loop without Qt (issue 49 #3): loaded, run and recorded through plain callbacks, the
way the window's adapter (workbench/gui/engine_worker.py) turns them into signals."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

from engine import EngineConfig
from workbench.live.engine_loop import EngineEvents, EngineLoop
from workbench.runs.run_log import read_run_log
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import Scenario


def test_the_engine_loop_loads_runs_and_records_through_plain_callbacks(tmp_path):
    loaded, finished, failed, states = threading.Event(), threading.Event(), [], []

    def traffic_state(state: str) -> None:
        states.append(state)
        if state == "finished":
            finished.set()

    events = EngineEvents(lambda stage, fraction: None, lambda info: loaded.set(), failed.append, traffic_state)
    loop = EngineLoop(events, runs_dir=tmp_path)
    loop.start()
    try:
        loop.load(EngineConfig(model="simulated:llama-3-8b@a100-80gb", max_model_len=2048))
        assert loaded.wait(60) and not failed
        traffic = TrafficProfile(
            arrival="constant",
            rate=50.0,
            num_requests=6,
            prompt_len=LengthDistribution(mean=32),
            output_len=LengthDistribution(mean=8),
        )
        loop.start_traffic(Scenario(name="loop", traffic=traffic))
        assert finished.wait(60) and not failed
    finally:
        assert loop.shutdown(60)
    assert states[0] == "idle" and "running" in states and states[-1] == "finished"
    assert len(loop.rows()) == 6 and all(row.state == "finished" for row in loop.rows())
    requests = read_run_log(loop.run_log_path).requests
    assert [record["planned"]["max_tokens"] for record in requests] == [8] * 6


def _wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _started_loop(runs_dir):
    """A running loop writing runs under `runs_dir`; (loop, loaded event, failures, traffic states)."""
    loaded, failed, states = threading.Event(), [], []
    events = EngineEvents(lambda stage, fraction: None, lambda info: loaded.set(), failed.append, states.append)
    loop = EngineLoop(events, runs_dir=runs_dir)
    loop.start()
    return loop, loaded, failed, states


def test_a_new_run_a_reload_and_a_shutdown_each_keep_the_run_they_replace(tmp_path):
    """Issue 58 #1 and #2: each run had one log, rewritten by the next Start, Apply or close.
    Every run now keeps its own folder, closed with a footer that says it was stopped early, by
    what, and how many planned requests it never sent; report.json says incomplete."""
    loop, loaded, failed, states = _started_loop(tmp_path)
    # In real time, so that each run has requests in flight and more to send when it is replaced.
    config = EngineConfig(model="simulated:llama-3-8b@a100-80gb", max_model_len=2048, simulation_speed=1.0)
    traffic = TrafficProfile(
        arrival="constant",
        rate=40.0,
        num_requests=400,
        prompt_len=LengthDistribution(mean=256),
        output_len=LengthDistribution(mean=200),
    )
    folders = []

    def run_until_in_flight(name: str) -> None:
        loop.start_traffic(Scenario(name=name, engine=config, traffic=traffic))
        _wait_for(lambda: loop.run_folder is not None and loop.run_folder not in folders)
        folders.append(loop.run_folder)
        _wait_for(lambda: loop.requests_in_flight() >= 3)

    try:
        loop.load(config)
        assert loaded.wait(60) and not failed
        run_until_in_flight("first")
        run_until_in_flight("second")  # a new run replaces the first
        loaded.clear()
        loop.load(dataclasses.replace(config, max_num_seqs=8))  # a reload replaces the second
        assert loaded.wait(60)
        run_until_in_flight("third")
    finally:
        assert loop.shutdown(60)  # closing the window replaces the third
    assert not failed
    assert len(set(folders)) == 3 and all(folder.parent == tmp_path for folder in folders)
    for folder, name, stopped_by in zip(
        folders, ("first", "second", "third"), ("a new run started", "the engine was reloaded", "the window closed")
    ):
        log = read_run_log(folder / "run.jsonl")
        report = json.loads((folder / "report.json").read_text())
        assert log.header["scenario"]["name"] == name and log.footer["stopped_by"] == stopped_by
        assert log.footer["stopped_early"] and not report["complete"] and report["stopped_early"]
        not_sent = log.footer["requests_not_sent"]
        assert len(log.requests) >= 3 and not_sent > 0 and len(log.requests) + not_sent == 400
        assert any(record["finish_reason"] in ("abort", "unfinished") for record in log.requests)
        assert f"planned requests never sent: {not_sent}" in report["incomplete_because"]
        assert not (folder / ".writing.lock").exists()  # each lock is released with its run


def test_stop_says_how_many_requests_were_never_sent_and_a_finished_run_is_complete(tmp_path):
    """Issue 58 #2: after Stop the window said "traffic: finished" and saved the run as complete."""
    loop, loaded, failed, states = _started_loop(tmp_path)
    config = EngineConfig(model="simulated:llama-3-8b@a100-80gb", max_model_len=2048, simulation_speed=1.0)
    long_traffic = TrafficProfile(
        arrival="constant", rate=20.0, num_requests=200, output_len=LengthDistribution(mean=50)
    )
    short_traffic = TrafficProfile(
        arrival="constant", rate=100.0, num_requests=5, output_len=LengthDistribution(mean=4)
    )
    try:
        loop.load(config)
        assert loaded.wait(60)
        loop.start_traffic(Scenario(name="stopped", engine=config, traffic=long_traffic))
        _wait_for(lambda: loop.requests_sent() >= 5)
        loop.stop_traffic()
        _wait_for(lambda: states[-1].startswith("stopped early: "))
        stopped = loop.run_folder
        never_sent = int(states[-1].split()[2].replace(",", ""))
        saved = tmp_path / "saved"
        saved.mkdir()
        loop.save_log_copy(saved / "run.jsonl")
        loop.start_traffic(Scenario(name="whole", engine=config, traffic=short_traffic))
        _wait_for(lambda: states[-1] == "finished" and loop.run_folder != stopped)
        whole = loop.run_folder
    finally:
        assert loop.shutdown(60)
    assert not failed
    copy = read_run_log(saved / "run.jsonl")
    assert copy.footer["stopped_early"] and copy.footer["stopped_by"] == "Stop"
    assert copy.footer["requests_not_sent"] == never_sent == 200 - len(copy.requests) > 0
    report = json.loads((stopped / "report.json").read_text())
    assert not report["complete"] and report["metrics"]["requests_not_sent"]["value"] == never_sent
    assert "stopped before its traffic ended (Stop)" in report["incomplete_because"]
    whole_report = json.loads((whole / "report.json").read_text())
    assert whole_report["complete"] and not whole_report["stopped_early"]


def test_a_rerun_on_the_same_engine_says_its_prefix_cache_starts_warm(tmp_path):
    """Issue 58 #5: a rerun started with the last run's prompts in the prefix cache (TTFT p50 31 →
    13 ms) and nothing said so. The run's header counts the blocks found cached at its start, and
    the traffic state says the run starts warm."""
    loop, loaded, failed, states = _started_loop(tmp_path)
    config = EngineConfig(model="simulated:llama-3-8b@a100-80gb", max_model_len=2048)
    traffic = TrafficProfile(arrival="constant", rate=50.0, num_requests=6, prompt_len=LengthDistribution(mean=256))
    folders = []
    try:
        loop.load(config)
        assert loaded.wait(60)
        for name in ("cold", "rerun"):
            loop.start_traffic(Scenario(name=name, engine=config, traffic=traffic))
            _wait_for(lambda: states[-1] == "finished" and loop.run_folder not in folders)
            folders.append(loop.run_folder)
    finally:
        assert loop.shutdown(60)
    assert not failed
    cold, rerun = (read_run_log(folder / "run.jsonl").header["prefix_cache_at_start"] for folder in folders)
    assert cold == {"cached_blocks": 0}
    assert rerun["cached_blocks"] >= 6 * 256 // 16  # every prompt's full blocks
    warm_states = [state for state in states if state.startswith("running")]
    assert warm_states[0] == "running"
    assert warm_states[1] == f"running (prefix cache warm: {rerun['cached_blocks']} blocks from earlier runs)"
