"""The scheduler's rules one at a time, at their boundaries, on the simulated executor (each test
here kills mutants of scheduler.py that the broader tests let through)."""

from __future__ import annotations

import pytest

from engine import EngineConfig, SamplingParams
from tests.engine.simulated import hang_guard, sim

TOKENS = SamplingParams(max_tokens=30, ignore_eos=True)


def drain(engine, limit=5_000):
    """Every output that ended, by id; fails on a step that never returns or a run that never ends."""
    ended = {}
    for _ in range(limit):
        if not engine.has_unfinished():
            return ended
        with hang_guard():
            outputs = engine.step().outputs
        ended.update({output.request_id: output for output in outputs if output.finished})
    pytest.fail("requests still unfinished")


def test_rejection_details_and_their_boundaries():
    engine = sim(
        num_kv_blocks=4, block_size=16, max_model_len=64, max_num_batched_tokens=32, enable_chunked_prefill=False
    )
    empty = engine.add_request([], TOKENS)
    too_long = engine.add_request([1] * 64, TOKENS)
    over_budget = engine.add_request([1] * 33, TOKENS)
    fits_budget = engine.add_request([1] * 32, SamplingParams(max_tokens=1, ignore_eos=True))  # exactly the budget
    ended = drain(engine)
    assert ended[empty].metrics.finish_detail == "the prompt is empty"
    assert ended[too_long].metrics.finish_detail == (
        "the prompt has 64 tokens; the context (max_model_len) is 64 tokens, leaving no room for output"
    )
    assert ended[over_budget].metrics.finish_detail == (
        "the prompt has 33 tokens, more than max_num_batched_tokens (32), and chunked prefill is off"
    )
    assert ended[fits_budget].finish_reason == "length"


def test_a_prompt_that_fills_the_whole_cache_with_its_first_token_is_accepted():
    # The simulated engine never has a cache smaller than one full-length request: ask the rule directly.
    from engine.requests.sequence import Sequence
    from engine.scheduling.block_manager import BlockManager
    from engine.scheduling.scheduler import Scheduler

    scheduler = Scheduler(EngineConfig(), BlockManager(num_blocks=4, block_size=16), max_model_len=128)

    def reason(prompt_len):
        return scheduler.rejection_reason(Sequence("r", [1] * prompt_len, TOKENS, 0.0, arrival_index=0, seed=0))

    assert reason(63) is None  # 63 + 1 = 64 tokens = 4 blocks
    assert reason(64) == "the prompt needs 5 KV blocks of 16 tokens; the whole cache has 4"


def test_a_prompt_exactly_at_the_threshold_is_long():
    engine = sim(long_prompt_threshold=32)
    at = engine.add_request([1] * 32, TOKENS)
    below = engine.add_request([1] * 31, TOKENS)
    assert engine.sequence(at).state == "waiting_long" and engine.sequence(below).state == "waiting"


def test_fcfs_ignores_priorities():
    engine = sim(max_num_seqs=1)
    first = engine.add_request([1, 2, 3], TOKENS, priority=5)
    second = engine.add_request([4, 5, 6], TOKENS, priority=0)
    assert engine.step().scheduled == {first: 3}
    ended = drain(engine)
    assert ended[first].metrics.finish_time <= ended[second].metrics.first_scheduled_time
    assert engine.scheduler.num_preemptions == 0


def test_under_the_priority_policy_the_higher_priority_head_goes_first_across_queues():
    engine = sim(max_num_seqs=1, scheduling_policy="priority", long_prompt_threshold=16)
    short = engine.add_request([1] * 4, TOKENS, priority=1)
    long = engine.add_request([2] * 20, TOKENS, priority=0)
    assert engine.step().scheduled == {long: 16}  # not the short one first, then a preemption
    assert engine.sequence(short).state == "waiting"


def test_equal_priorities_never_preempt_each_other():
    engine = sim(max_num_seqs=1, scheduling_policy="priority")
    for index in range(3):
        engine.add_request([index + 1] * 5, TOKENS, priority=2)
    drain(engine)
    assert engine.scheduler.num_preemptions == 0


def test_a_budget_of_one_token_still_serves_and_every_decode_fits_an_exact_budget():
    engine = sim(max_num_batched_tokens=1)
    request_id = engine.add_request([1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True))
    assert len(drain(engine)[request_id].token_ids) == 3
    engine = sim(max_num_batched_tokens=2)
    ids = [engine.add_request([index + 1], SamplingParams(max_tokens=5, ignore_eos=True)) for index in range(2)]
    engine.step()
    engine.step()  # both one-token prompts prefilled; now both decode
    for _ in range(3):
        assert set(engine.step().scheduled) == set(ids)


def test_two_long_prompts_prefill_together_when_max_long_prefills_is_two():
    engine = sim(long_prompt_threshold=16, max_long_prefills=2, max_num_batched_tokens=64)
    first, second = (engine.add_request([index + 1] * 40, TOKENS) for index in range(2))
    assert engine.step().scheduled == {first: 16, second: 16}


def test_a_one_token_prompt_is_prefill_and_its_next_token_a_decode():
    engine = sim()
    engine.add_request([7], TOKENS)
    first, second = engine.step().stats, engine.step().stats
    assert (first.prefill_tokens, first.decode_tokens, second.prefill_tokens, second.decode_tokens) == (1, 0, 0, 1)


def test_preemptions_are_counted_once_each_and_nothing_is_admitted_in_their_step():
    engine = sim(num_kv_blocks=8, block_size=16, max_model_len=128, max_num_batched_tokens=64, long_prompt_threshold=32)
    ids = [
        engine.add_request(list(range(index * 50, index * 50 + 20)), SamplingParams(max_tokens=100, ignore_eos=True))
        for index in range(3)
    ]
    ended, total = {}, 0
    while engine.has_unfinished():
        waiting_before = {seq.request_id for seq in [*engine.scheduler.waiting, *engine.scheduler.waiting_long]}
        result = engine.step()
        if result.stats.preemptions_total > total:  # this step preempted: it admits nobody
            assert not waiting_before & set(result.scheduled), result.scheduled
        total = result.stats.preemptions_total
        ended.update({output.request_id: output for output in result.outputs if output.finished})
    per_request = sum(ended[request_id].metrics.preemptions for request_id in ids)
    assert per_request == total == engine.scheduler.num_preemptions == 3


def test_the_cycles_the_property_tests_found_end():
    """Two configurations in which an overdue long prompt and a higher-priority request used to
    preempt each other forever (within one step, then across steps)."""
    within_a_step = sim(
        max_model_len=11,
        block_size=1,
        num_kv_blocks=12,
        enable_prefix_caching=False,
        max_num_seqs=1,
        max_num_batched_tokens=4,
        enable_chunked_prefill=False,
        long_prompt_threshold=2,
        long_prompt_max_wait_s=0.001,
        scheduling_policy="priority",
    )
    for index in range(11):
        within_a_step.add_request(
            [index % 6] * index, SamplingParams(max_tokens=1, ignore_eos=True), priority=index % 4
        )
    drain(within_a_step)
    across_steps = sim(
        max_model_len=46,
        block_size=1,
        num_kv_blocks=56,
        enable_prefix_caching=False,
        max_num_seqs=11,
        max_num_batched_tokens=34,
        enable_chunked_prefill=False,
        long_prompt_threshold=28,
        long_prompt_max_wait_s=0.001,
        scheduling_policy="priority",
    )
    for index in range(12):
        across_steps.add_request(
            [index % 6] * (18 + index), SamplingParams(max_tokens=8, ignore_eos=True), priority=index % 4
        )
    across_steps.add_request([0], SamplingParams(max_tokens=13, ignore_eos=True))
    drain(across_steps)


def test_each_request_samples_with_its_own_seed_whatever_its_batch(tiny_llama):
    from tests.tiny_models import tiny_engine

    directory, _ = tiny_llama
    random = SamplingParams(max_tokens=12, temperature=1.0, ignore_eos=True)
    prompt = [5, 9, 2, 40, 7]
    together = [
        output.token_ids for output in tiny_engine(directory, seed=3).generate([prompt, prompt, [8, 8, 8]], random)
    ]
    assert together[0] != together[1]  # the same prompt, two requests: two seeds
    alone = tiny_engine(directory, seed=3).generate([prompt], random)[0].token_ids
    assert alone == together[0]  # the first request's tokens do not depend on its batch mates


def test_a_request_ends_at_exactly_max_model_len():
    """Issue 58's planted bug: the context-full stop with `>` for `>=` ran a request to 513 tokens
    where the model has 512. One that asks for more than fits ends with the context exactly full."""
    engine = sim(max_model_len=512)
    request_id = engine.add_request([1] * 500, SamplingParams(max_tokens=100, ignore_eos=True))
    metrics = drain(engine)[request_id].metrics
    assert 500 + metrics.num_output_tokens == 512
    assert metrics.finish_reason == "length" and metrics.finish_detail == "context full (max_model_len 512)"
    assert metrics.stop_cause == "context full"  # typed, for the report (issue 60 #2)
    short = engine.add_request([1] * 10, SamplingParams(max_tokens=3, ignore_eos=True))
    assert drain(engine)[short].metrics.stop_cause == "max_tokens"
