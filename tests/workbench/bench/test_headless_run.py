"""Headless runs on a tiny model: the files a run writes, a run log that survives an interrupted
run, and the mission's scenario measured with the long-prompt queue on and off."""

from __future__ import annotations

import csv
import itertools
import json

import pytest

from engine import EngineConfig, LLMEngine
from tests.workbench.tiny_runs import tiny_scenario
from workbench.analysis.report import build_report
from workbench.backends.local import LocalBackend
from workbench.bench.headless import run_headless
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.runs.runner import ScenarioRunner
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import Scenario, ScenarioEvent


def test_a_run_writes_every_file_with_every_required_field(tmp_path, tiny_llama):
    directory, _ = tiny_llama
    report = run_headless(tiny_scenario(directory), tmp_path)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    assert report["complete"] and report["seed"] == 3 and report["requests_planned"] == 14
    assert report["slo"] == {"ttft_ms": 10_000, "tpot_ms": 10_000, "e2e_ms": 60_000}
    assert set(report["versions"]) >= {"workbench", "torch", "python", "device", "model"}
    assert report["versions"]["model"]["files"]["model.safetensors"]  # sha256 of the weights
    assert report["scenario"]["engine"]["max_num_batched_tokens"] == 64  # the full resolved configuration
    # The machine's speed before the first request and after the last (real weights, timed here).
    assert set(report["machine_probe"]) == {"start", "end"}
    assert all(probe["copy_gb_s"] > 0 and probe["matmul_gflop_s"] > 0 for probe in report["machine_probe"].values())
    metrics = report["metrics"]
    duration = metrics["duration_s"]["value"]
    # 12 chats of 6 output tokens and 2 bursts of 3: 78 tokens; 5 gaps per chat and 2 per burst request.
    assert metrics["output_tok_s"]["value"] == pytest.approx(78 / duration) and metrics["output_tok_s"]["n"] == 14
    assert metrics["request_throughput_req_s"]["value"] == pytest.approx(14 / duration)
    for latency, n in (("ttft", 14), ("tpot", 14), ("itl", 12 * 5 + 2 * 2), ("e2e", 14), ("queue_time", 14)):
        for statistic in ("mean", "p50", "p90", "p99"):
            assert metrics[f"{latency}_{statistic}_ms"]["n"] == n, latency
    assert metrics["requests_finished"]["value"] == 14 and metrics["goodput_perc"]["value"] == 100.0
    assert (
        metrics["requests_rejected"]["value"]
        == metrics["requests_aborted"]["value"]
        == metrics["requests_unfinished"]["value"]
        == 0
    )
    assert metrics["chat/ttft_p99_ms"]["n"] == 12 and metrics["burst/ttft_p99_ms"]["n"] == 2
    with (tmp_path / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 14 and {
        "ttft_ms",
        "tpot_ms",
        "e2e_ms",
        "queue_time_ms",
        "preemptions",
        "finish_reason",
        "token_times",
    } <= set(rows[0])
    ttfts = sorted(float(row["ttft_ms"]) for row in rows)
    assert metrics["ttft_p50_ms"]["value"] == pytest.approx((ttfts[6] + ttfts[7]) / 2)  # the median of 14, from the CSV
    log_lines = [json.loads(line) for line in (tmp_path / RUN_LOG_NAME).read_text().splitlines()]
    with (tmp_path / "steps.csv").open() as handle:
        steps = list(csv.DictReader(handle))
    assert len(steps) == sum(1 for line in log_lines if line["type"] == "step") > 0
    assert sum(int(step["prefill_tokens"]) for step in steps) == pytest.approx(
        metrics["prefill_tok_s"]["value"] * duration
    )


def test_an_interrupted_run_still_yields_a_partial_report(tmp_path, tiny_llama):
    directory, _ = tiny_llama
    ended = itertools.count(1)

    def crash_after_five(ended_request, total):
        if next(ended) == 5:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the run

    with pytest.raises(KeyboardInterrupt):  # it goes on to the caller, after the files are written
        run_headless(tiny_scenario(directory), tmp_path, on_progress=crash_after_five)
    report = json.loads((tmp_path / "report.json").read_text())
    assert not report["complete"]
    assert report["metrics"]["requests_finished"]["value"] == 5
    # A crash can also cut the last line in half: the log is still readable up to it.
    with (tmp_path / RUN_LOG_NAME).open("a") as log:
        log.write('{"type": "step", "time_s": 1.0, "step_dur')
    partial = build_report(read_run_log(tmp_path / RUN_LOG_NAME))
    assert partial["metrics"]["requests_finished"]["value"] == 5 and not partial["complete"]


def test_a_failed_step_fails_its_requests_and_the_run_goes_on_to_its_report(tmp_path, tiny_llama):
    """The engine core's policy, as in the window and serve: before it, a failed step ended a
    headless run with a traceback and no report."""
    directory, _ = tiny_llama
    scenario = tiny_scenario(directory)
    engine = LLMEngine(scenario.engine)
    execute, steps = engine.executor.execute, itertools.count(1)

    def fails_on_step_four(batch):
        if next(steps) == 4:
            raise RuntimeError("planted failure")
        return execute(batch)

    engine.executor.execute = fails_on_step_four
    report = run_headless(scenario, tmp_path, backend=LocalBackend(engine))
    metrics = report["metrics"]
    assert 1 <= metrics["requests_failed"]["value"] < 14
    assert metrics["requests_failed"]["value"] + metrics["requests_finished"]["value"] == 14
    assert report["incomplete_because"] == ["the engine step failed: RuntimeError: planted failure"]
    assert engine.block_manager.num_used_blocks == 0 and not engine.has_unfinished()


class StepCostClock:
    """Time that passes only while the executor works: 1 ms a step plus 0.1 ms a token. Latencies
    then follow the scheduling decisions alone, however busy the test machine is."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def charge(self, execute):
        def timed(batch):
            self.now += 0.001 + 0.0001 * (batch.num_prefill_tokens + batch.num_decode_tokens)
            return execute(batch)

        return timed


def mission_ttft(directory, long_prompt_threshold):
    """20 chats and one long prompt (scaled to the tiny model) arriving together."""
    scenario = Scenario(
        name="mission",
        engine=EngineConfig(
            model=str(directory),
            device="cpu",
            num_kv_blocks=256,
            block_size=4,
            max_num_batched_tokens=64,
            max_num_seqs=32,
            long_prompt_threshold=long_prompt_threshold,
        ),
        events=[
            ScenarioEvent(at_s=0.0, action="inject", count=1, prompt_tokens=500, output_tokens=4, tag="long"),
            ScenarioEvent(at_s=0.0, action="inject", count=20, prompt_tokens=8, output_tokens=8, tag="chat"),
        ],
    )
    clock = StepCostClock()
    engine = LLMEngine(scenario.engine, clock=clock)
    engine.executor.execute = clock.charge(engine.executor.execute)
    result = ScenarioRunner(LocalBackend(engine), scenario).run()
    chats = sorted(request.metrics.ttft_ms for request in result.requests if request.tag == "chat")
    long_ttft = [request.metrics.ttft_ms for request in result.requests if request.tag == "long"][0]
    return chats[-1], long_ttft  # p99 of 20 = the maximum


def test_the_long_prompt_queue_lowers_the_chats_p99_ttft(tiny_llama):
    directory, _ = tiny_llama
    chats_on, long_on = mission_ttft(directory, long_prompt_threshold=32)
    chats_off, long_off = mission_ttft(directory, long_prompt_threshold=0)
    assert chats_on < chats_off / 3
    assert chats_on < long_on  # every chat had its first token before the long prompt's
    assert chats_off > long_off  # without the queue they waited behind it


def test_closed_loop_keeps_the_concurrency(tiny_llama):
    directory, _ = tiny_llama
    scenario = tiny_scenario(directory)
    scenario.traffic = TrafficProfile(
        arrival="closed_loop",
        concurrency=3,
        num_requests=9,
        output_len=LengthDistribution(mean=5),
        prompt_len=LengthDistribution(mean=6),
    )
    scenario.events = []
    engine = LLMEngine(scenario.engine)
    running = []
    runner = ScenarioRunner(
        LocalBackend(engine),
        scenario,
        on_step=lambda step: running.append(step.stats.num_running + step.stats.num_waiting),
    )
    result = runner.run()
    assert len(result.requests) == 9 and max(running) == 3


def test_a_simulated_clock_jumps_over_quiet_to_the_next_arrival(tmp_path):
    """Ten minutes between two arrivals on a simulated GPU at full speed: the runner waits once,
    not in 120,000 polls of 5 ms (an hour of a trace's quiet took minutes of wall time)."""
    trace = tmp_path / "quiet.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,50,5\n600,50,5\n")
    scenario = Scenario(
        name="quiet",
        engine=EngineConfig(model="simulated:llama-3-8b@a100-80gb"),
        traffic=TrafficProfile(prompts="trace", trace_file=str(trace), num_requests=0),
    )
    backend = LocalBackend(LLMEngine(scenario.engine))
    waits = []
    sleep = backend.sleep
    backend.sleep = lambda seconds: waits.append(seconds) or sleep(seconds)
    report = run_headless(scenario, tmp_path / "run", backend=backend)
    metrics = report["metrics"]
    assert metrics["requests_finished"]["value"] == 2 and len(waits) <= 2
    assert metrics["duration_s"]["value"] == pytest.approx(600, abs=1)  # the quiet is in the run's time
