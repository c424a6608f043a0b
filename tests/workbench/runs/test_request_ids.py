"""A runner numbers each run's requests from 0, and never reuses the id of a request the backend
may still hold."""

from __future__ import annotations

from engine import EngineConfig, LLMEngine
from workbench.backends.local import LocalBackend
from workbench.runs.runner import ScenarioRunner
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import Scenario

TRAFFIC = TrafficProfile(
    arrival="constant",
    rate=1000.0,
    num_requests=3,
    tag="conv",
    prompt_len=LengthDistribution(mean=8),
    output_len=LengthDistribution(mean=4),
)


def test_each_run_numbers_its_requests_from_zero_and_skips_ids_left_behind(tiny_llama):
    directory, _ = tiny_llama
    engine = LLMEngine(EngineConfig(model=str(directory), device="cpu", num_kv_blocks=64, block_size=4))
    runner = ScenarioRunner(LocalBackend(engine), Scenario(name="first", traffic=TRAFFIC))
    first = runner.run()
    assert sorted(ended.request_id for ended in first.requests) == ["conv-0", "conv-1", "conv-2"]
    # The window's second run on the same runner: it said conv-3, conv-4, ... (conv-977 after a long run).
    runner._left_behind.add("conv-1")  # as if a server had not honoured that request's abort
    runner.load_traffic(Scenario(name="second", traffic=TRAFFIC))
    second = runner.run().requests  # each run's result holds its own requests only
    assert sorted(ended.request_id for ended in second) == ["conv-0", "conv-2", "conv-3"]  # conv-1: left behind
    assert sorted(ended.sent_index for ended in second) == [0, 2, 3]
