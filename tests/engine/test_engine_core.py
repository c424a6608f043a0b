"""Engine behaviours held here on a simulated GPU, in milliseconds, that the slower tests reach only
through HTTP, Qt or a real model (issue 77 #15: each was a planted bug those tests let through):
a failed step ends its requests as errors and the engine goes on; after `end_all` a new request
is refused as ShuttingDown, the one error serve turns into 503; rejected proposals give their
blocks back."""

from __future__ import annotations

import pytest

from engine import EngineError, SamplingParams
from engine.core import EngineCore, ShuttingDown
from tests.engine.simulated import sim

PARAMS = SamplingParams(max_tokens=8, ignore_eos=True)
PARAMS_LONG = SamplingParams(max_tokens=60, ignore_eos=True)


def test_a_failed_step_ends_its_requests_as_errors_not_aborts_and_the_engine_goes_on(monkeypatch):
    core = EngineCore(sim())
    for request_id in ("a", "b"):
        core.add_request(list(range(1, 40)), PARAMS, request_id=request_id)
    execute = core.engine.executor.execute

    def fails_once(batch):
        monkeypatch.setattr(core.engine.executor, "execute", execute)
        raise RuntimeError("planted")

    monkeypatch.setattr(core.engine.executor, "execute", fails_once)
    step = core.step()
    assert step.failure == "the engine step failed: RuntimeError: planted" and core.failed_steps == 1
    ended = {output.request_id: output for output in step.result.outputs}
    assert sorted(ended) == ["a", "b"] and not core.has_unfinished()
    for output in ended.values():
        assert output.finished and output.finish_reason == "error" and output.metrics.finish_reason == "error"
    core.add_request(list(range(1, 40)), PARAMS, request_id="after")
    while core.has_unfinished():
        outputs = core.step().result.outputs
    assert [(output.request_id, output.finish_reason) for output in outputs] == [("after", "length")]


def test_a_request_after_end_all_is_refused_as_shutting_down():
    core = EngineCore(sim())
    core.add_request(list(range(1, 40)), PARAMS, request_id="a")
    assert core.end_all() == ["a"]
    with pytest.raises(ShuttingDown):
        core.add_request([1, 2, 3], PARAMS, request_id="late")
    assert issubclass(ShuttingDown, EngineError)  # callers that catch EngineError still catch it


def test_rejected_proposals_give_their_blocks_back_on_a_simulated_draft():
    """The fast twin of test_speculation's trace test (SmolLM2, about 300 s): a simulated draft model
    accepted half the time, blocks of 4 tokens and 4 proposals a step, so rejected proposals often
    reach into a block of their own. After every step no sequence holds a block past the one its
    next token goes in, the trace's block counts balance, and every block is free at the end
    (planted: release_tail skipped, caught here in a second)."""
    engine = sim(speculative_method="draft", draft_acceptance_rate=0.5, num_speculative_tokens=4, block_size=4)
    for request_id in ("a", "b", "c"):
        engine.add_request(list(range(1, 30)), PARAMS_LONG, request_id=request_id)
    rejected_steps = 0
    while engine.has_unfinished():
        trace = engine.step().trace
        rejected_steps += sum(record.rejected > 0 for record in trace.speculation)
        assert (
            trace.kv_before.used_blocks + trace.blocks_taken() - trace.blocks_returned() == trace.kv_after.used_blocks
        )
        for seq_id in engine.unfinished_ids():
            seq = engine.sequence(seq_id)
            assert len(seq.block_tables[0]) <= -(-seq.num_tokens // 4)
    assert rejected_steps > 10
    assert engine.num_kv_blocks == engine.block_manager.num_free_blocks
