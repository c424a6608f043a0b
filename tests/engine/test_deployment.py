"""Several instances on one time axis (engine/deployment.py, issue 50 #2): data
parallelism and prefill/decode disaggregation, each against times worked out by hand from the cost
model, and the settings a deployment cannot take."""

from __future__ import annotations

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.deployment import Deployment
from engine.errors import ConfigError, EngineError
from engine.simulation.catalogue import hardware_profile, model_shape
from engine.simulation.cost_model import StepShape
from engine.simulation.parallel import Parallelism

LLAMA_3_8B, _ = model_shape("llama-3-8b")  # 32 layers, 8 KV heads of 128: 128 KiB of K/V a token at 16 bits
LLAMA_3_70B, _ = model_shape("llama-3-70b")
H100 = hardware_profile("h100-80gb")  # NVLink 4: 450 GB/s each way, 5 us a hop
PROMPT = list(range(1, 1001))  # 1,000 tokens: 62 full blocks of 16 and 8 tokens over


def deployment(prefill_instances: int, gpus: int = 2, **settings) -> Deployment:
    return Deployment(
        EngineConfig(
            model=f"simulated:llama-3-8b@{gpus}xh100-80gb",
            data_parallel_size=gpus,
            prefill_instances=prefill_instances,
            max_model_len=4096,
            max_num_batched_tokens=2048,  # a 1,000-token prompt in one step
            long_prompt_threshold=0,
            **settings,
        )
    )


def run(deployment: Deployment) -> dict:
    ended = {}
    while deployment.has_unfinished():
        for output in deployment.step().outputs:
            if output.finished:
                ended[output.request_id] = output
    return ended


def test_a_kv_transfer_by_hand():
    # Llama-3-70B on TP 4: each GPU holds 2 of the 8 KV heads of all 80 layers, 80 KiB a token,
    # and sends its share to its counterpart: 2,000 tokens x 81,920 B / 450 GB/s + one 5 us hop.
    assert Parallelism(tensor=4).kv_transfer_s(2000, LLAMA_3_70B, 2, 450e9, 5e-6) == pytest.approx(
        2000 * 81_920 / 450e9 + 5e-6, rel=1e-12
    )  # 369.1 us
    assert Parallelism().kv_transfer_s(1000, LLAMA_3_8B, 2, 450e9, 5e-6) == pytest.approx(
        1000 * 131_072 / 450e9 + 5e-6, rel=1e-12
    )  # 296.3 us


def test_one_request_prefilled_on_one_instance_and_decoded_on_the_other_by_hand():
    d = deployment(prefill_instances=1)
    d.add_request(PROMPT, SamplingParams(max_tokens=5, ignore_eos=True), arrival_time=0.0, request_id="r")
    output = run(d)["r"]
    cost = d.instances[0].executor.cost_model
    # The prefill instance: the whole prompt in one step, the request starting there (its stack's
    # per-request cost); its first token ends it.
    first_token = cost.step_time(StepShape(((1000, 1000, True),), starting=1))
    # The K/V over NVLink, then the decode instance: its prefix cache holds the 62 full blocks it
    # was sent (992 tokens), so its first step computes the 8 tokens over and the first token.
    ready = first_token + 1000 * 131_072 / 450e9 + cost.hardware.link_latency_s
    times = [first_token, ready + cost.step_time(StepShape(((9, 1001, True),)))]
    for context in (1002, 1003, 1004):
        times.append(times[-1] + cost.step_time(StepShape(((1, context, True),))))
    metrics = output.metrics
    assert output.finish_reason == "length" and len(output.token_ids) == 5
    assert metrics.token_times == pytest.approx(times, abs=1e-12)
    assert (metrics.prefill_instance, metrics.instance) == (0, 1)
    assert (metrics.kv_transfer_start_time, metrics.kv_ready_time) == pytest.approx((first_token, ready), abs=1e-12)
    assert metrics.decode_scheduled_time == pytest.approx(ready, abs=1e-12)
    assert metrics.num_prompt_tokens == 1000 and metrics.arrival_time == 0.0
    assert d.instances[1].block_manager.prefix_hit_tokens == 992  # the K/V it was sent, not recomputed


def test_colocated_instances_share_the_requests_and_match_one_engine_each():
    alone = LLMEngine(
        EngineConfig(
            model="simulated:llama-3-8b@h100-80gb",
            max_model_len=4096,
            max_num_batched_tokens=2048,
            long_prompt_threshold=0,
        )
    )
    alone.add_request(PROMPT, SamplingParams(max_tokens=8, ignore_eos=True), arrival_time=0.0, request_id="a")
    while alone.has_unfinished():
        for output in alone.step().outputs:
            expected = output.metrics.token_times
    d = deployment(prefill_instances=0)
    for request_id in ("x", "y"):
        d.add_request(PROMPT, SamplingParams(max_tokens=8, ignore_eos=True), arrival_time=0.0, request_id=request_id)
    ended = run(d)
    assert {ended["x"].metrics.instance, ended["y"].metrics.instance} == {0, 1}  # one each: the least loaded
    for output in ended.values():
        assert output.metrics.token_times == pytest.approx(expected, abs=1e-12)
        assert output.metrics.kv_ready_time is None


def test_a_request_arriving_mid_step_joins_the_next_step_not_a_later_one():
    """`until` (the next arrival) stops the deployment's clock before any event after it: the
    instance busy at that moment admits the newcomer at the end of its step in progress. Run
    without it, the same loop would first run that next step and admit it one step late."""
    d = deployment(prefill_instances=0)
    for request_id in ("a", "b"):  # both instances busy decoding
        d.add_request(PROMPT, SamplingParams(max_tokens=50, ignore_eos=True), arrival_time=0.0, request_id=request_id)
    d.step(until=1.0)  # instance 0's prefill, ending at e0
    d.step(until=1.0)  # instance 1's prefill
    next_step_start = d.instances[0].clock()
    arrival = next_step_start - 1e-4  # during instance 0's first step
    assert d.step(until=arrival).stats is None and d.clock() == arrival
    d.add_request(PROMPT, SamplingParams(max_tokens=4, ignore_eos=True), arrival_time=arrival, request_id="late")
    late = run(d)["late"]
    assert late.metrics.instance == 0
    assert late.metrics.first_scheduled_time == pytest.approx(next_step_start, abs=1e-12)


def test_a_request_arriving_exactly_when_a_busy_instances_step_starts_joins_that_step():
    """The tie: an event at `until` itself is not run (a planted `>` for `>=` ran the step first and
    admitted the newcomer one step late; the tie test before had the instance idle)."""
    d = deployment(prefill_instances=0)
    for request_id in ("a", "b"):
        d.add_request(PROMPT, SamplingParams(max_tokens=50, ignore_eos=True), arrival_time=0.0, request_id=request_id)
    d.step(until=1.0)
    d.step(until=1.0)
    arrival = d.instances[0].clock()  # instance 0's next step starts at this very time
    assert d.instances[0].has_unfinished()
    assert d.step(until=arrival).stats is None and d.clock() == arrival
    d.add_request(PROMPT, SamplingParams(max_tokens=4, ignore_eos=True), arrival_time=arrival, request_id="late")
    late = run(d)["late"]
    assert late.metrics.instance == 0 and late.metrics.first_scheduled_time == pytest.approx(arrival, abs=1e-12)


def test_a_request_aborted_while_its_kv_is_sent_ends_there():
    d = deployment(prefill_instances=1)
    d.add_request(PROMPT, SamplingParams(max_tokens=20, ignore_eos=True), arrival_time=0.0, request_id="r")
    first = d.step()
    assert [(output.request_id, output.finished, len(output.token_ids)) for output in first.outputs] == [
        ("r", False, 1)
    ]
    state, metrics, prompt_tokens, tokens = d.progress("r")
    assert (state, prompt_tokens, tokens) == ("sending K/V", 1000, 1001)
    assert d.abort("r")
    ended = run(d)["r"]
    assert ended.finish_reason == "abort" and ended.token_ids == first.outputs[0].token_ids
    assert d.instances[1].num_steps == 0 and not d.has_unfinished()  # the decode instance never saw it


def test_a_prompt_too_long_for_the_context_is_rejected_by_its_prefill_instance():
    d = deployment(prefill_instances=1)
    d.add_request(list(range(1, 5000)), SamplingParams(max_tokens=4), arrival_time=0.0, request_id="long")
    assert run(d)["long"].finish_reason == "rejected"


def test_settings_a_deployment_cannot_take_get_one_line():
    with pytest.raises(
        ConfigError, match=r"^8xh100-80gb has 8 GPUs, not the 4 these settings need \(.* = 1 x 4 x 1\); expected 8"
    ):
        Deployment(EngineConfig(model="simulated:llama-3-8b@8xh100-80gb", tensor_parallel_size=4))
    with pytest.raises(ConfigError, match=r"^4xh100-80gb has 4 GPUs, not the 2 these settings need"):
        Deployment(EngineConfig(model="simulated:llama-3-8b@4xh100-80gb", data_parallel_size=2))
    with pytest.raises(ConfigError, match="one engine is one instance"):
        LLMEngine(EngineConfig(model="simulated:llama-3-8b@2xh100-80gb", data_parallel_size=2))
    with pytest.raises(ConfigError, match="prefill_instances: 2 of data_parallel_size 2 instances leaves none"):
        EngineConfig(data_parallel_size=2, prefill_instances=2)
    with pytest.raises(ConfigError, match="smollm2-135m runs as one engine"):
        Deployment(EngineConfig(model="smollm2-135m", data_parallel_size=2, prefill_instances=1))
    with pytest.raises(ConfigError, match="need a simulated model"):
        LLMEngine(EngineConfig(model="smollm2-135m", prefill_instances=1, data_parallel_size=2))
    with pytest.raises(ConfigError, match="simulation_speed"):
        deployment(prefill_instances=1, simulation_speed=1.0)
    with pytest.raises(EngineError, match="receive_kv: expected enable_prefix_caching = true and step_trace = false"):
        LLMEngine(EngineConfig(model="simulated:llama-3-8b@h100-80gb")).receive_kv(PROMPT)


def test_simultaneous_requests_alternate_between_decode_instances_and_every_load_ends_at_zero():
    """Issue 58's planted bug: the decode instance's load never counted up, so every request went
    to the first decode instance. One prefill and two decode instances: four requests at once
    decode two on each, and the loads are back at zero once they end."""
    d = deployment(prefill_instances=1, gpus=3)
    for request_id in "abcd":
        d.add_request(PROMPT, SamplingParams(max_tokens=8, ignore_eos=True), arrival_time=0.0, request_id=request_id)
    ended = run(d)
    decoded_on = [ended[request_id].metrics.instance for request_id in "abcd"]
    assert sorted(decoded_on) == [1, 1, 2, 2] and decoded_on[0] != decoded_on[1]
    assert all(load == 0 for load in d._load.values())


def test_an_arrival_exactly_at_an_instances_step_end_ties_and_goes_to_the_first():
    """Issue 58's planted bug: an arrival at exactly the moment instance 0's last step ended went
    to instance 1. Both are free then with nothing to do: a tie, which goes to the first."""
    d = deployment(prefill_instances=0)
    d.add_request(PROMPT, SamplingParams(max_tokens=4, ignore_eos=True), arrival_time=0.0, request_id="x")
    first = run(d)["x"].metrics
    assert first.instance == 0 and d.instances[0].clock() == first.finish_time > d.instances[1].clock()
    d.add_request(PROMPT, SamplingParams(max_tokens=4, ignore_eos=True), arrival_time=first.finish_time, request_id="y")
    assert run(d)["y"].metrics.instance == 0


def test_a_failed_instance_step_ends_that_instances_requests_and_the_deployment_serves_on(monkeypatch):
    """Issue 79 #2: a deployment stepped its instances outside the core, so one failed step ended
    the whole run. Through each instance's core, the failed step's requests end with finish reason
    "error" (routed as the deployment's), the step says what failed, and the other instance's
    request, and a later one, finish."""
    d = deployment(prefill_instances=0)
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    for request_id in ("a", "b"):
        d.add_request(PROMPT, params, arrival_time=0.0, request_id=request_id)
    failing = d.instances[0].executor
    execute = failing.execute

    def fails_once(batch):
        monkeypatch.setattr(failing, "execute", execute)
        raise RuntimeError("planted")

    monkeypatch.setattr(failing, "execute", fails_once)
    failures, ended = [], {}
    while d.has_unfinished():
        step = d.step()
        failures += [step.failure] if step.failure else []
        ended |= {output.request_id: output for output in step.outputs if output.finished}
    assert failures == ["the engine step failed: RuntimeError: planted"]
    assert sorted(reason for reason in (output.finish_reason for output in ended.values())) == ["error", "length"]
    d.add_request(PROMPT, params, arrival_time=d.now, request_id="later")
    assert run(d)["later"].finish_reason == "length"
