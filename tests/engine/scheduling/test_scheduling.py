"""Scheduling behaviour on a tiny model: the long-prompt queue, rejection, abort, priorities and
the bookkeeping that must return to zero."""

from __future__ import annotations

from engine import SamplingParams
from tests.tiny_models import tiny_engine

SHORT = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)


def run_until_done(engine):
    """Step to the end; returns {request_id: step index of its first token} and the outputs."""
    first_token_step, finished, index = {}, {}, 0
    while engine.has_unfinished():
        for output in engine.step().outputs:
            if output.new_token_ids:
                first_token_step.setdefault(output.request_id, index)
            if output.finished:
                finished[output.request_id] = output
        index += 1
    return first_token_step, finished


def long_then_short_chats(engine):
    long_id = engine.add_request(list(range(1, 90)) * 3, SHORT)  # 267 tokens
    short_ids = [engine.add_request([7, 8, 9, index + 10, 11, 12], SHORT) for index in range(6)]
    return long_id, short_ids


def test_long_prompt_queue_lets_short_chats_finish_prefill_first(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, max_num_batched_tokens=32, long_prompt_threshold=64, max_long_prefills=1)
    long_id, short_ids = long_then_short_chats(engine)
    assert engine.scheduler.waiting_long and len(engine.scheduler.waiting) == 6
    first_token_step, _ = run_until_done(engine)
    assert max(first_token_step[rid] for rid in short_ids) < first_token_step[long_id]


def test_without_the_long_prompt_queue_short_chats_wait_behind_the_long_prompt(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, max_num_batched_tokens=32, long_prompt_threshold=0)
    long_id, short_ids = long_then_short_chats(engine)
    first_token_step, _ = run_until_done(engine)
    assert min(first_token_step[rid] for rid in short_ids) >= first_token_step[long_id]


def test_at_most_max_long_prefills_prefill_at_once(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, max_num_batched_tokens=64, long_prompt_threshold=16, max_long_prefills=1)
    for offset in range(3):
        engine.add_request([offset + 1] * 40, SHORT)
    while engine.has_unfinished():
        engine.step()
        prefilling_long = [seq for seq in engine.scheduler.running if seq.is_long and seq.is_prefilling]
        assert len(prefilling_long) <= 1


def test_long_prefill_chunks_are_capped_at_the_threshold(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, max_num_batched_tokens=64, long_prompt_threshold=16)
    engine.add_request([3] * 50, SHORT)
    prefill_sizes = []
    while engine.has_unfinished():
        prefill_sizes.append(engine.step().stats.prefill_tokens)
    assert [size for size in prefill_sizes if size] == [16, 16, 16, 2]


def test_over_long_and_oversized_prompts_are_rejected_with_a_reason(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, max_model_len=64, num_kv_blocks=8)  # 8 blocks x 4 tokens = 32 tokens
    too_long = engine.add_request([1] * 64, SHORT)
    too_big = engine.add_request([1] * 40, SHORT)
    fine = engine.add_request([1] * 8, SHORT)
    _, finished = run_until_done(engine)
    assert finished[too_long].finish_reason == "rejected"
    assert (
        "64 tokens" in finished[too_long].metrics.finish_detail
        and "max_model_len" in finished[too_long].metrics.finish_detail
    )
    assert finished[too_big].finish_reason == "rejected"
    assert "11 KV blocks" in finished[too_big].metrics.finish_detail
    assert finished[fine].finish_reason == "length" and len(finished[fine].token_ids) == 4
    assert engine.step().stats.rejections_total == 2


def test_abort_frees_every_block_and_reports_the_abort(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory)
    keep = engine.add_request([1, 2, 3, 4, 5, 6, 7], SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True))
    drop = engine.add_request([9] * 30, SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True))
    for _ in range(3):
        engine.step()
    held = len(engine.block_manager.held_block_ids(engine.sequence(drop)))
    used_before = engine.block_manager.num_used_blocks
    assert engine.abort(drop) and not engine.abort(drop)
    assert engine.block_manager.num_used_blocks == used_before - held
    result = engine.step()
    aborted = [output for output in result.outputs if output.request_id == drop]
    assert aborted[0].finished and aborted[0].finish_reason == "abort"
    engine.abort(keep)
    engine.step()
    assert engine.block_manager.num_used_blocks == 0 and not engine.has_unfinished()


def test_all_ended_leaves_no_used_blocks_and_consistent_stats(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, num_kv_blocks=20, max_num_batched_tokens=16)
    for length in (3, 10, 17, 25, 6, 30):
        engine.add_request(list(range(1, length + 1)), SamplingParams(max_tokens=9, temperature=0.0, ignore_eos=True))
    last = None
    while engine.has_unfinished():
        last = engine.step().stats
        assert 0 <= last.kv_blocks_used <= last.kv_blocks_total == 20
        assert last.num_seqs <= engine.config.max_num_seqs
        assert last.prefill_tokens + last.decode_tokens <= 16
    assert last.kv_blocks_used == 0 and last.num_running == last.num_waiting == 0


def test_priority_policy_serves_lower_priority_values_first(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, scheduling_policy="priority", max_num_seqs=1)
    relaxed = engine.add_request([1, 2, 3], SHORT, priority=5)
    late_but_urgent = engine.add_request([4, 5, 6], SHORT, priority=0)
    first_token_step, _ = run_until_done(engine)
    assert first_token_step[late_but_urgent] < first_token_step[relaxed]
