"""The engine loop without Qt (issue 49 #3): loaded, run and recorded through plain callbacks, the
way the window's adapter (workbench/gui/engine_worker.py) turns them into signals."""

from __future__ import annotations

import threading

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
