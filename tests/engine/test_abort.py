"""Aborting a request in each state it can be in, then serving on as if it had never been there."""

from __future__ import annotations

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams

LONG_OUTPUT = SamplingParams(max_tokens=200, ignore_eos=True)


def engine_with_a_request_in(state: str):
    """A simulated engine and the id of a request that is now in `state`."""
    engine = LLMEngine(
        EngineConfig(
            model="simulated:llama-2-7b@h100-80gb",
            num_kv_blocks=16,
            block_size=16,
            max_model_len=256,
            max_num_seqs=2,
            max_num_batched_tokens=64,
            long_prompt_threshold=48,
        )
    )
    if state == "waiting":
        engine.add_request([1] * 10, LONG_OUTPUT)
        engine.add_request([2] * 10, LONG_OUTPUT)
        target = engine.add_request([3] * 10, LONG_OUTPUT)  # max_num_seqs = 2: it waits
        engine.step()
    elif state == "waiting_long":
        target = engine.add_request([4] * 100, LONG_OUTPUT)
    elif state == "prefilling":
        target = engine.add_request([4] * 100, LONG_OUTPUT)
        engine.step()  # the first of three chunks
    elif state == "decoding":
        target = engine.add_request([5] * 10, LONG_OUTPUT)
        engine.step()
        engine.step()
    elif state == "preempted":
        first = engine.add_request([6] * 100, LONG_OUTPUT)
        target = engine.add_request([7] * 60, LONG_OUTPUT)  # 16 blocks of 16 cannot hold both to the end
        while engine.sequence(target) is not None and engine.sequence(target).state != "preempted":
            engine.step()
        assert engine.sequence(first).state == "decoding"
    elif state == "finished":
        target = engine.add_request([8] * 10, SamplingParams(max_tokens=2, ignore_eos=True))
        while engine.has_unfinished():
            engine.step()
    else:
        target = "never-added"
    if state not in ("finished", "unknown"):
        assert engine.sequence(target).state == state
    return engine, target


@pytest.mark.parametrize(
    "state", ["waiting", "waiting_long", "prefilling", "decoding", "preempted", "finished", "unknown"]
)
def test_abort_in_every_state_then_keep_serving(state):
    engine, target = engine_with_a_request_in(state)
    known = state not in ("finished", "unknown")
    assert engine.abort(target) is known
    assert engine.abort(target) is False  # twice: nothing more to do
    scheduler = engine.scheduler
    assert all(seq.request_id != target for seq in [*scheduler.running, *scheduler.waiting, *scheduler.waiting_long])
    outputs = []
    later = engine.add_request([9] * 10, SamplingParams(max_tokens=3, ignore_eos=True))
    while engine.has_unfinished():
        outputs += engine.step().outputs
    ended = {output.request_id: output for output in outputs if output.finished}
    if known:
        assert ended[target].finish_reason == "abort"
    assert ended[later].finish_reason == "length" and len(ended[later].token_ids) == 3
    assert not scheduler.running and not scheduler.waiting and not scheduler.waiting_long
    assert engine.block_manager.num_used_blocks == 0


def test_arrival_time_is_when_a_request_was_due_not_when_the_busy_loop_sent_it():
    """Requests due during a long step are sent after it; their clocks start when they were due."""
    from workbench.backends.local import LocalBackend
    from workbench.runs.runner import ScenarioRunner
    from workbench.traffic.profile import LengthDistribution, TrafficProfile
    from workbench.traffic.prompts import PromptMaker
    from workbench.traffic.request_plan import RequestPlan
    from workbench.traffic.scenario import Scenario, ScenarioEvent

    config = EngineConfig(model="simulated:llama-2-7b@h100-80gb", max_num_batched_tokens=8192, long_prompt_threshold=0)
    scenario = Scenario(
        name="busy",
        engine=config,
        traffic=TrafficProfile(
            arrival="constant",
            rate=200.0,
            num_requests=20,
            prompt_len=LengthDistribution(mean=16),
            output_len=LengthDistribution(mean=4),
        ),
        events=[ScenarioEvent(at_s=0.0, action="inject", count=1, prompt_tokens=3900, output_tokens=2, tag="long")],
    )
    engine = LLMEngine(config)
    plan = RequestPlan(scenario, engine.max_model_len, PromptMaker(None, vocab_size=100))
    planned = []
    while plan.has_timed:
        planned.append(plan.pop_timed().arrival_s)
    runner = ScenarioRunner(LocalBackend(engine), scenario)
    result = runner.run()
    arrivals = sorted(ended.metrics.arrival_time - result.start_time for ended in result.requests)
    assert arrivals == pytest.approx(planned, abs=1e-9)
    waited = [ended.metrics.first_scheduled_time - ended.metrics.arrival_time for ended in result.requests]
    assert max(waited) > 0.02  # some were due while the 3,900-token prefill ran


def test_every_restart_of_traffic_on_a_simulated_clock_sends_all_of_it():
    """Restarting the traffic again and again (the window's Start) at odd clock values: each run's
    requests must all be sent, however the arrival times round against the clock."""
    from workbench.backends.local import LocalBackend
    from workbench.runs.runner import ScenarioRunner
    from workbench.traffic.profile import LengthDistribution, TrafficProfile
    from workbench.traffic.scenario import Scenario

    engine = LLMEngine(EngineConfig(model="simulated:llama-2-7b@h100-80gb"))
    traffic = TrafficProfile(
        arrival="poisson",
        rate=20.0,
        num_requests=10,
        prompt_len=LengthDistribution(mean=16),
        output_len=LengthDistribution(mean=4),
    )
    sent = []
    runner = ScenarioRunner(LocalBackend(engine), None, on_send=lambda request_id, _prompt: sent.append(request_id))
    for start in range(8):
        engine.sleep(0.3 + start * 0.0137)  # idle time between presses of Start
        runner.load_traffic(Scenario(name="again", traffic=traffic, seed=start))
        sent.clear()
        for _ in range(20_000):
            if not (runner.traffic_pending or engine.has_unfinished()):
                break
            runner.tick()
        assert sent == [f"chat-{number}" for number in range(10)], f"start {start + 1}"  # each run from chat-0
        assert not engine.has_unfinished()


def test_aborting_most_of_a_long_queue_keeps_the_rest_in_order():
    """Aborts mark a waiting sequence rather than re-heapify the queue (a Stop that dropped 37,000
    waiting requests one abort at a time took minutes); the line that remains is the same."""
    engine = LLMEngine(
        EngineConfig(
            model="simulated:llama-2-7b@h100-80gb",
            num_kv_blocks=64,
            block_size=16,
            max_model_len=256,
            max_num_seqs=1,
            max_num_batched_tokens=64,
        )
    )
    ids = [
        engine.add_request([1 + index % 50] * 8, SamplingParams(max_tokens=1, ignore_eos=True)) for index in range(2000)
    ]
    kept = ids[::97]
    for request_id in set(ids) - set(kept):
        assert engine.abort(request_id)
    assert len(engine.scheduler.waiting) == len(kept)
    assert [seq.request_id for seq in engine.scheduler.waiting] == kept
    started = []
    while engine.has_unfinished():
        started += [
            output.request_id for output in engine.step().outputs if output.finished and output.finish_reason != "abort"
        ]
    assert started == kept
