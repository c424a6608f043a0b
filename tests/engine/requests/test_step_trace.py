"""Each step's causal record (engine/requests/step_trace.py) on the real model: what the scheduler saw,
what it scheduled and from which queue, which blocks moved and why, what reached the caller."""

from __future__ import annotations

from engine import SamplingParams
from engine.requests.step_trace import ALLOCATE, RELEASE, REUSE, WAITING, WAITING_LONG
from tests.tiny_models import tiny_engine
from workbench.backends.local import LocalBackend
from workbench.step_traces.block_replay import BlockReplay

GREEDY = dict(temperature=0.0, ignore_eos=True)


def balanced(trace) -> bool:
    return trace.kv_before.used_blocks + trace.blocks_taken() - trace.blocks_returned() == trace.kv_after.used_blocks


def test_the_mission_scenario_shows_the_long_prompt_chunked_from_its_own_queue_beside_the_chats(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, long_prompt_threshold=64, max_num_batched_tokens=256, max_num_seqs=32)
    long_prompt = engine.add_request(
        [(7 * index) % 90 + 1 for index in range(300)], SamplingParams(max_tokens=4, **GREEDY)
    )
    chats = [engine.add_request([index + 1] * 8, SamplingParams(max_tokens=16, **GREEDY)) for index in range(20)]
    first, second = engine.step().trace, engine.step().trace

    assert (first.step, first.waiting, first.waiting_long, first.running, first.token_budget) == (0, 20, 1, 0, 256)
    rows = {row.request_id: row for row in first.rows}
    assert all(
        (rows[chat].kind, rows[chat].start, rows[chat].end, rows[chat].admitted_from) == ("prefill", 0, 8, WAITING)
        for chat in chats
    )
    long_row = rows[long_prompt]  # the chats took 160 tokens of the budget; the long prompt a chunk of the threshold
    assert (long_row.kind, long_row.start, long_row.end, long_row.num_prompt_tokens, long_row.admitted_from) == (
        "prefill",
        0,
        64,
        300,
        WAITING_LONG,
    )
    # Each chat got two fresh blocks for 8 tokens (block size 4), the long prompt 16 for 64.
    fresh = {change.request_id: change.block_ids for change in first.block_changes if change.action == ALLOCATE}
    assert all(len(fresh[chat]) == 2 for chat in chats) and len(fresh[long_prompt]) == 16
    assert {emitted.request_id for emitted in first.emitted if emitted.token_ids} == set(chats)  # not the long one yet

    decodes = [row for row in second.rows if row.kind == "decode"]
    assert sorted(row.request_id for row in decodes) == sorted(chats)
    assert [
        (row.request_id, row.start, row.end, row.admitted_from) for row in second.rows if row.kind == "prefill"
    ] == [(long_prompt, 64, 128, None)]
    assert second.execute_s > 0 and second.other_s >= 0

    replay, traces = BlockReplay(engine.num_kv_blocks), [first, second]
    while len(traces) < 12:
        traces.append(engine.step().trace)
    for trace in traces:
        assert balanced(trace), trace.step
        replay.apply(trace)
    rows_of = {request_id: index for index, request_id in enumerate([long_prompt, *chats])}
    live = LocalBackend(engine).block_owners(
        {request_id: row for request_id, row in rows_of.items() if engine.sequence(request_id)}
    )
    assert (replay.owners(rows_of) == live).all()


def test_a_forced_preemption_names_its_victim_and_reason_and_frees_its_blocks_in_the_same_step(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, num_kv_blocks=6, block_size=4)  # two requests of up to 20 tokens need 10
    first = engine.add_request(list(range(1, 9)), SamplingParams(max_tokens=12, **GREEDY))
    second = engine.add_request(list(range(11, 19)), SamplingParams(max_tokens=12, **GREEDY))
    while engine.has_unfinished():
        trace = engine.step().trace
        assert balanced(trace)
        if trace.preemptions:
            break
    (preemption,) = trace.preemptions
    assert preemption.victim == second
    assert preemption.reason.startswith(
        f"no free KV block for request {first} (needs 1, 0 free); victim {second}: the latest arrival"
    )
    (release,) = [change for change in trace.block_changes if change.action == RELEASE]
    assert (release.request_id, release.cause, len(release.block_ids)) == (second, "preempted", 3)
    assert release.free_list == list(reversed(release.block_ids))  # nobody shared them; the tail is reused first
    # The freed block goes straight to the request that asked, in the same step.
    (allocation,) = [change for change in trace.block_changes if change.action == ALLOCATE]
    assert allocation.request_id == first and allocation.block_ids[0] in release.block_ids


def test_prefix_reuse_rejections_and_aborts_are_recorded_where_they_happen(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, block_size=4)
    shared = list(range(1, 13))  # three full blocks
    engine.add_request(shared + [20], SamplingParams(max_tokens=8, **GREEDY), request_id="a")
    engine.step()
    engine.add_request(shared + [30], SamplingParams(max_tokens=2, **GREEDY), request_id="b")
    engine.add_request([], SamplingParams(max_tokens=2), request_id="empty")
    trace = engine.step().trace
    (reuse,) = [change for change in trace.block_changes if change.action == REUSE]
    assert reuse.request_id == "b" and len(reuse.block_ids) == 3 and reuse.free_list == []  # "a" still holds them
    assert [row.start for row in trace.rows if row.request_id == "b"] == [12]  # only the new token is computed
    rejected = next(emitted for emitted in trace.emitted if emitted.request_id == "empty")
    assert (rejected.finish_reason, rejected.finish_detail) == ("rejected", "the prompt is empty")

    engine.abort("b")
    trace = engine.step().trace
    (aborted,) = trace.released_before
    assert (aborted.request_id, aborted.cause, aborted.action) == ("b", "aborted", RELEASE)
    assert aborted.free_list == aborted.block_ids[3:]  # the shared prefix stays with "a"
    assert any(emitted.request_id == "b" and emitted.finish_reason == "abort" for emitted in trace.emitted)
    assert balanced(trace)


def test_a_request_that_waits_is_named_with_the_reason_at_the_head_of_its_queue(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, max_num_seqs=2, long_prompt_threshold=16, max_num_batched_tokens=32)
    running = [engine.add_request([index + 1] * 4, SamplingParams(max_tokens=8, **GREEDY)) for index in range(2)]
    third = engine.add_request([9] * 4, SamplingParams(max_tokens=8, **GREEDY))
    long_prompt = engine.add_request([5] * 40, SamplingParams(max_tokens=8, **GREEDY))
    trace = engine.step().trace
    assert sorted(row.request_id for row in trace.rows) == sorted(running)
    assert {(held.request_id, held.queue, held.reason) for held in trace.held} == {
        (third, WAITING, "max_num_seqs (2) reached"),
        (long_prompt, WAITING_LONG, "max_num_seqs (2) reached"),
    }


def test_a_used_up_token_budget_is_the_reason_when_slots_and_blocks_are_free(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, max_num_batched_tokens=8)
    for index in range(3):
        engine.add_request([index + 1] * 4, SamplingParams(max_tokens=8, **GREEDY), request_id=f"r{index}")
    (held,) = engine.step().trace.held
    assert (held.request_id, held.queue, held.reason) == ("r2", WAITING, "the step's token budget (8 tokens) is used")
