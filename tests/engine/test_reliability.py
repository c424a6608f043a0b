"""Regression tests for the bugs random configurations found (one test per bug, each failing on the
code before its fix), run on the simulated executor: the real scheduler and block manager, no
forward pass."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine import ConfigError, EngineConfig, EngineError, LLMEngine, SamplingParams
from engine.simulation.catalogue import hardware_names, model_names
from tests.engine.simulated import LLAMA_ON_H100, sim
from workbench.bench.headless import run_headless
from workbench.traffic.planned_traffic import PlannedTraffic
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.prompts import PromptMaker
from workbench.traffic.scenario import SLO, Scenario, ScenarioEvent

FIXED = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def step_until_done(engine, limit=10_000):
    """Steps to the end; returns {request id: finished output}. Fails on a livelock."""
    finished = {}
    for _ in range(limit):
        if not engine.has_unfinished():
            return finished
        for output in engine.step().outputs:
            if output.finished:
                finished[output.request_id] = output
    pytest.fail(f"still unfinished after {limit} steps: {engine.scheduler.waiting_long or engine.scheduler.waiting}")


def test_a_long_prompt_runs_with_chunked_prefill_off():
    engine = sim(enable_chunked_prefill=False, max_model_len=2048)  # 600 >= long_prompt_threshold 512
    request_id = engine.add_request(list(range(600)), FIXED)
    finished = step_until_done(engine, limit=100)
    assert finished[request_id].finish_reason == "length" and engine.clock() > 0


def test_generate_returns_its_own_outputs_beside_other_requests():
    engine = sim()
    queued = engine.add_request([1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True))
    dropped = engine.add_request([4, 5, 6], FIXED)
    engine.abort(dropped)
    outputs = engine.generate([[7, 8], [9, 10, 11]], FIXED)
    assert [len(output.token_ids) for output in outputs] == [8, 8]
    assert queued not in {output.request_id for output in outputs}
    with pytest.raises(EngineError, match="3 prompts but 1 SamplingParams"):
        engine.generate([[1], [2], [3]], [FIXED])


def test_generate_broadcasts_one_sampling_params():
    outputs = sim().generate([[1], [2], [3]], FIXED)
    assert len(outputs) == 3


def preemption_counts(policy, first_priority=0, second_priority=0):
    """A 60-token prompt, then a 20-token one, each to 120 tokens: 8 blocks of 16 tokens cannot
    hold both. The second (short) one decodes while the first is still prefilling in chunks of
    32, so it is the first to ask for a block that is not there."""
    engine = sim(
        num_kv_blocks=8,
        block_size=16,
        max_model_len=128,
        max_num_batched_tokens=64,
        long_prompt_threshold=32,
        scheduling_policy=policy,
    )
    first = engine.add_request(list(range(60)), SamplingParams(max_tokens=60, ignore_eos=True), priority=first_priority)
    second = engine.add_request(
        list(range(100, 120)), SamplingParams(max_tokens=100, ignore_eos=True), priority=second_priority
    )
    finished = step_until_done(engine)
    return finished[first].metrics.preemptions, finished[second].metrics.preemptions


def test_preemption_evicts_the_latest_arrival_even_when_it_is_the_one_asking():
    first, second = preemption_counts("fcfs")
    assert first == 0 and second >= 1


def test_preemption_never_evicts_a_higher_priority_for_a_lower_one():
    first, second = preemption_counts("priority", first_priority=0, second_priority=9)
    assert first == 0 and second >= 1


def test_preemption_evicts_the_lowest_priority_even_when_it_arrived_first():
    first, second = preemption_counts("priority", first_priority=9, second_priority=0)
    assert first >= 1 and second == 0


def test_a_waiting_request_of_higher_priority_preempts_a_running_one():
    engine = sim(max_num_seqs=1, scheduling_policy="priority")
    relaxed = engine.add_request([1, 2, 3], SamplingParams(max_tokens=50, ignore_eos=True), priority=5)
    engine.step()
    urgent = engine.add_request([4, 5, 6], FIXED, priority=0)
    engine.step()
    assert engine.sequence(relaxed).state == "preempted" and engine.sequence(urgent).state == "decoding"
    finished = step_until_done(engine)
    assert finished[urgent].metrics.finish_time < finished[relaxed].metrics.finish_time


def first_long_admission_s(policy, max_wait_s, long_priority=0, short_priority=0, steps=3_000):
    """A 1,000-token prompt behind steady short traffic that always fills max_num_seqs = 4."""
    engine = sim(max_num_seqs=4, scheduling_policy=policy, long_prompt_max_wait_s=max_wait_s)
    long_id = engine.add_request(list(range(1000)), FIXED, priority=long_priority)
    for _ in range(steps):
        while len(engine.scheduler.waiting) < 4:
            engine.add_request([1, 2, 3, 4], SamplingParams(max_tokens=16, ignore_eos=True), priority=short_priority)
        engine.step()
        scheduled = engine.sequence(long_id).metrics.first_scheduled_time
        if scheduled is not None:
            return scheduled
    return None


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_the_long_queue_is_admitted_once_it_has_waited_long_enough(policy):
    assert first_long_admission_s(policy, max_wait_s=0) is None  # without the guarantee it starves
    admitted = first_long_admission_s(policy, max_wait_s=0.5)
    assert admitted is not None and 0.5 <= admitted < 1.0  # within a few steps of becoming overdue


def test_priority_orders_both_queues_together():
    admitted = first_long_admission_s("priority", max_wait_s=0, long_priority=0, short_priority=1)
    assert admitted is not None and admitted < 0.1


def test_one_token_prompt_chunks_are_prefill_that_does_not_sample():
    engine = sim(long_prompt_threshold=1, max_long_prefills=2)
    engine.add_request([1, 2, 3], FIXED)
    stats = engine.step().stats
    assert (stats.prefill_tokens, stats.decode_tokens) == (1, 0)
    batch = engine.scheduler.schedule(engine.clock())
    assert not batch.decodes and [entry.samples for entry in batch.prefills] == [False]


EXPECTED = {
    "temperature": "a finite number >= 0 (0 = greedy)",
    "top_p": "a number in (0, 1]",
    "min_p": "a number in [0, 1]",
    "top_k": "an integer >= 0 (0 = off)",
    "max_tokens": "a positive integer",
    "seed": "an integer or None",
    "stop": "a list of non-empty strings",
    "stop_token_ids": "token ids >= 0",
    "ignore_eos": "true or false",
}


@pytest.mark.parametrize(
    "field, value",
    [
        ("top_k", 2.5),
        ("top_k", -1),
        ("temperature", float("nan")),
        ("temperature", float("inf")),
        ("temperature", "hot"),
        ("top_p", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("min_p", 1.5),
        ("min_p", -0.1),
        ("max_tokens", 0),
        ("max_tokens", 2.0),
        ("seed", 1.5),
        ("stop", [""]),
        ("stop_token_ids", [1.5]),
        ("ignore_eos", "yes"),
    ],
)
def test_sampling_params_refuse_what_the_sampler_cannot_use(field, value):
    shown = 1.5 if field == "stop_token_ids" else value  # for a list of token ids, the bad item is shown
    with pytest.raises(ConfigError) as error:
        SamplingParams(**{field: value})
    assert str(error.value) == f"{field}: expected {EXPECTED[field]}, got {shown!r}"


def test_a_tiny_temperature_is_greedy_and_numpy_integers_are_accepted():
    assert SamplingParams(temperature=1e-45).greedy
    params = SamplingParams(top_k=np.int64(3), max_tokens=np.int32(4), seed=np.uint8(7))
    assert (params.top_k, params.max_tokens, params.seed) == (3, 4, 7) and type(params.top_k) is int
    engine = sim()
    request_id = engine.add_request(np.arange(5, dtype=np.int64), FIXED)
    assert engine.sequence(request_id).token_ids == [0, 1, 2, 3, 4]


def test_automatic_request_ids_skip_the_ids_callers_chose():
    engine = sim()
    engine.add_request([1, 2], FIXED, request_id="0")
    engine.add_request([1, 2], FIXED, request_id="1")
    assert engine.add_request([1, 2], FIXED) == "2"
    with pytest.raises(EngineError, match="already in use"):
        engine.add_request([1, 2], FIXED, request_id="2")


def strict_json(path):
    def refuse(constant):
        raise ValueError(f"{path}: bare {constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_a_report_with_undefined_percentiles_is_strict_json(tmp_path):
    # Single-token outputs: TPOT and ITL have no values (n = 0).
    scenario = Scenario(
        name="one-token",
        engine=EngineConfig(model=LLAMA_ON_H100),
        events=[ScenarioEvent(at_s=0.0, action="inject", count=3, prompt_tokens=16, output_tokens=1)],
    )
    run_headless(scenario, tmp_path)
    metrics = strict_json(tmp_path / "report.json")["metrics"]
    assert metrics["tpot_p99_ms"] == {"value": None, "unit": "ms/token", "n": 0, "interval": None}
    assert metrics["itl_mean_ms"]["value"] is None and metrics["ttft_p99_ms"]["n"] == 3


def test_a_time_limited_run_reports_every_request_that_arrived(tmp_path):
    scenario = Scenario(
        name="overload",
        engine=EngineConfig(model=LLAMA_ON_H100, max_num_seqs=8),
        traffic=TrafficProfile(
            arrival="poisson",
            rate=40.0,
            num_requests=400,
            prompt_len=LengthDistribution(mean=256),
            output_len=LengthDistribution(mean=2000),
        ),
        slo=SLO(ttft_ms=60_000),
        max_duration_s=5.0,
    )
    report = run_headless(scenario, tmp_path)
    metrics = report["metrics"]
    finished, unfinished = metrics["requests_finished"]["value"], metrics["requests_unfinished"]["value"]
    not_sent = metrics["requests_not_sent"]["value"]
    assert not report["complete"] and any("in flight" in reason for reason in report["incomplete_because"])
    assert unfinished > 150 and not_sent > 150  # ~200 arrived in 5 s at 40 req/s; 8 slots finish few
    assert (
        finished + unfinished + metrics["requests_rejected"]["value"] + metrics["requests_aborted"]["value"] + not_sent
        == 400
    )
    assert metrics["goodput_perc"]["n"] == 400 - not_sent  # every request that arrived
    assert metrics["goodput_perc"]["value"] <= 100.0 * finished / (400 - not_sent)
    logged = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert sum(1 for line in logged if line.get("finish_reason") == "unfinished") == unfinished
    assert "finished requests" in report["notes"]["latency"]


def test_every_catalogued_model_and_gpu_pair_that_fits_loads_with_the_defaults():
    """The default KV cache is what 90% of the GPU leaves after the weights (vLLM's convention);
    a pair that cannot hold its weights, or one full-length request, says so with the numbers."""
    loaded, refused = [], {}
    for model in model_names():
        for hardware in hardware_names():
            try:
                engine = LLMEngine(EngineConfig(model=f"simulated:{model}@{hardware}"))
            except ConfigError as error:
                refused[f"{model}@{hardware}"] = str(error)
                continue
            loaded.append(f"{model}@{hardware}")
            assert engine.kv_capacity_tokens >= engine.max_model_len
    assert "llama-2-7b@h100-80gb" in loaded and len(loaded) >= 50
    assert refused["llama-2-70b@a100-40gb"].startswith(
        "llama-2-70b weights need 138.0 GB at 16 bits but a100-40gb has 40.0 GB"
    )
    for pair, message in refused.items():
        assert "weights need" in message or "-token request needs" in message, f"{pair}: {message}"


def test_a_kv_cache_larger_than_the_device_is_refused_with_the_arithmetic():
    with pytest.raises(
        ConfigError, match=r"kv_cache_memory: 1,048,576 MiB asked for, but h100-80gb .* leaves [\d,]+ MiB"
    ):
        sim(kv_cache_memory=1 << 40)


def test_a_shared_prefix_that_leaves_no_room_is_a_config_error():
    profile = TrafficProfile(num_requests=3, shared_prefix_tokens=62)
    with pytest.raises(ConfigError, match="shared_prefix_tokens: 62 leaves no room .* at most 61"):
        PlannedTraffic(profile, PromptMaker(None, 100), 0, max_model_len=64)


def test_a_preempted_batch_member_gives_its_tokens_back_to_the_budget():
    """R decodes (1 of the 8-token budget) when W, of higher priority, needs the only slot: R leaves
    the batch, and W's whole 8-token prompt fits in the same step."""
    engine = sim(max_num_seqs=1, max_num_batched_tokens=8, scheduling_policy="priority", long_prompt_threshold=0)
    relaxed = engine.add_request(list(range(40)), SamplingParams(max_tokens=50, ignore_eos=True), priority=5)
    while engine.sequence(relaxed).state != "decoding":
        engine.step()
    urgent = engine.add_request(list(range(100, 108)), FIXED, priority=0)
    result = engine.step()
    assert result.scheduled == {urgent: 8} and engine.sequence(urgent).num_output_tokens == 1
    assert engine.sequence(relaxed).state == "preempted"
