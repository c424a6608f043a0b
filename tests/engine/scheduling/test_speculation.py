"""Speculative decoding by n-gram prompt lookup on the real engine: the tokens are exactly plain
greedy decoding's on both bundled models (alone, beside other requests, through stops), the
scheduler pays for proposals from the token budget and free blocks and gives back what rejected
ones took, the step trace records proposed and accepted tokens, and the settings it cannot keep
exact are refused."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import EngineConfig, LLMEngine
from engine.errors import ConfigError, EngineError
from engine.requests.sampling_params import SamplingParams
from engine.scheduling.speculation import NgramProposer, accepted_length, next_proposal_limit
from tests.engine.parity_prompts import PROMPTS
from workbench.cli.arguments import add_engine_options, engine_config, speculative_overrides
from workbench.step_traces.log import read_trace, trace_record
from workbench.step_traces.text import format_step

# Output that copies its prompt: where prompt lookup has something to propose.
COPYING = (
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
    "def mul(a, b):\n    return a * b\n\n" * 3 + "Repeat the code above exactly:\n"
)
GREEDY = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)


def _tokens(engine: LLMEngine, prompts: list[str], params: SamplingParams = GREEDY) -> list[list[int]]:
    return [output.token_ids for output in engine.generate(prompts, params)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, schedule", [("smollm2-135m", "constant"), ("gemma3-270m", "constant"), ("smollm2-135m", "heuristic")]
)
def test_greedy_tokens_are_exactly_plain_decodings_alone_and_in_a_batch(
    model, schedule, make_smollm_engine, make_gemma_engine
):
    make = make_smollm_engine if model == "smollm2-135m" else make_gemma_engine
    plain = make(compile_decode="off")
    speculating = make(
        compile_decode="off",
        speculative_method="ngram",
        num_speculative_tokens=4,
        num_speculative_tokens_schedule=schedule,
    )
    prompts = [COPYING, *PROMPTS]
    expected = _tokens(plain, prompts)
    assert _tokens(speculating, [COPYING]) == expected[:1]  # alone: every decode step speculates
    assert _tokens(speculating, prompts) == expected  # beside requests that propose little or nothing
    assert speculating.scheduler.num_accepted_tokens > 0  # it did speculate, and gained


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_with_the_default_settings_too(model, make_smollm_engine, make_gemma_engine):
    """The file's quantization and a bf16 cache. Alone only: in bf16, plain decoding itself is not
    the same alone and in a batch (SmolLM2's copying prompt beside four others turns at its sixth
    token), so a batch's comparison would test batching, not speculation."""
    make = make_smollm_engine if model == "smollm2-135m" else make_gemma_engine
    settings = dict(dtype="auto", quantization="auto", kv_cache_dtype="auto", compile_decode="off")
    plain, speculating = make(**settings), make(speculative_method="ngram", num_speculative_tokens=4, **settings)
    assert _tokens(speculating, [COPYING]) == _tokens(plain, [COPYING])
    assert speculating.scheduler.num_accepted_tokens > 0


@pytest.mark.slow
def test_a_stop_among_accepted_tokens_ends_the_request_there(make_smollm_engine):
    plain = make_smollm_engine(compile_decode="off")
    speculating = make_smollm_engine(compile_decode="off", speculative_method="ngram", num_speculative_tokens=5)
    # A token first proposed and accepted in a step that kept two proposals or more: stopping on it
    # drops the tokens after it from that step. This prompt's output copies its words.
    copy = "Copy: alpha beta gamma delta epsilon zeta\n" * 3 + "Copy:"
    speculating.add_request(copy, GREEDY)
    output, stop = [], None
    while stop is None and speculating.has_unfinished():
        trace = speculating.step().trace
        for record in trace.speculation:
            if record.accepted >= 2 and record.proposed[0] not in output:
                stop = record.proposed[0]
        output += [token for entry in trace.emitted for token in entry.token_ids]
    assert stop is not None
    for request_id in speculating.unfinished_ids():
        speculating.abort(request_id)
    speculating.step()
    params = SamplingParams(temperature=0.0, max_tokens=48, stop_token_ids=[stop])
    (expected,), (output,) = plain.generate([copy], params), speculating.generate([copy], params)
    assert output.token_ids == expected.token_ids and output.token_ids[-1] == stop
    assert output.finish_reason == "stop" and len(output.metrics.token_times) == len(output.token_ids)
    # max_tokens: a proposal never runs past it.
    short = SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True)
    assert [len(ids) for ids in _tokens(speculating, [COPYING], short)] == [7]


@pytest.mark.slow
def test_the_trace_records_proposals_and_rejected_ones_give_their_blocks_back(make_smollm_engine):
    engine = make_smollm_engine(
        compile_decode="off", speculative_method="ngram", num_speculative_tokens=4, block_size=4
    )
    engine.add_request(COPYING, SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    proposed = accepted = rejected_steps = 0
    while engine.has_unfinished():
        result = engine.step()
        trace, stats = result.trace, result.stats
        for record in trace.speculation:
            emitted = next(entry for entry in trace.emitted if entry.request_id == record.request_id)
            assert len(emitted.token_ids) == record.accepted + 1  # the agreed proposals and one of its own
            proposed, accepted = proposed + len(record.proposed), accepted + record.accepted
            rejected_steps += record.rejected > 0
        assert stats.proposed_tokens == sum(len(record.proposed) for record in trace.speculation)
        assert stats.accepted_tokens == sum(record.accepted for record in trace.speculation)
        # What the blocks of rejected proposals did: before + taken - returned = after.
        assert (
            trace.kv_before.used_blocks + trace.blocks_taken() - trace.blocks_returned() == trace.kv_after.used_blocks
        )
        for seq_id in engine.unfinished_ids():
            seq = engine.sequence(seq_id)  # holds no block past the one its next token goes in
            assert -(-seq.num_computed_tokens // 4) <= len(seq.block_tables[0]) <= -(-seq.num_tokens // 4)
        # The run log keeps the records, and `workbench trace` says them.
        assert read_trace(trace_record(trace, full=True)).speculation == trace.speculation
        for record in trace.speculation:
            assert f"request {record.request_id}: proposed {record.proposed}, accepted" in format_step(trace)
    assert proposed > accepted > 0 and rejected_steps > 0
    assert engine.num_kv_blocks == engine.block_manager.num_free_blocks
    metrics = engine.scheduler
    assert (metrics.num_draft_tokens, metrics.num_accepted_tokens) == (proposed, accepted)


@pytest.mark.slow
def test_proposals_take_from_the_token_budget_and_never_preempt(make_smollm_engine):
    """A budget of 3 tokens leaves a decode at most 2 proposals; a cache with no block to spare
    drops the proposals instead of preempting a request."""
    engine = make_smollm_engine(
        compile_decode="off", speculative_method="ngram", num_speculative_tokens=6, max_num_batched_tokens=3
    )
    engine.add_request(COPYING, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    while engine.has_unfinished():
        rows = engine.step().trace.rows
        assert sum(row.end - row.start for row in rows) <= 3
    tight = make_smollm_engine(
        compile_decode="off", speculative_method="ngram", num_speculative_tokens=8, num_kv_blocks=9, block_size=16
    )
    prompt = tight.tokenizer.encode(COPYING)  # 133 tokens: 9 blocks leave room for 11 more
    (output,) = tight.generate([prompt], SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    assert output.metrics.preemptions == 0 and output.metrics.stop_cause == "the whole KV cache"
    assert output.metrics.proposed_tokens > 0  # it proposed, where the blocks allowed


def _earlier_continuations(tokens: list[int], n: int) -> list[list[int]]:
    """By brute force: what followed each earlier occurrence of the last n tokens, latest first."""
    suffix = tokens[-n:]
    return [tokens[start + n :] for start in range(len(tokens) - n - 1, -1, -1) if tokens[start : start + n] == suffix]


@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.integers(1, 3), st.integers(0, 3), st.integers(1, 5))
def test_ngram_proposals_are_what_followed_the_latest_earlier_occurrence_of_the_longest_suffix(
    tokens, min_n, extra, limit
):
    max_n = min_n + extra
    proposed = NgramProposer(min_n, max_n).propose(tokens, limit)
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        continuations = _earlier_continuations(tokens, n)
        if continuations:
            assert proposed == continuations[0][:limit]
            return
    assert proposed == []


def test_accepted_length_stops_at_the_first_disagreement():
    assert accepted_length([5, 6, 7], [5, 6, 9, 1]) == 2
    assert accepted_length([5, 6, 7], [4, 6, 7, 1]) == 0
    assert accepted_length([5, 6, 7], [5, 6, 7, 1]) == 3
    assert accepted_length([], [3]) == 0


@pytest.mark.slow
def test_settings_it_cannot_keep_exact_are_refused_in_one_line(make_smollm_engine):
    engine = make_smollm_engine(compile_decode="off", speculative_method="ngram")
    with pytest.raises(EngineError, match=r"temperature = 0.7: ngram speculative decoding .* greedy"):
        engine.add_request("Hello", SamplingParams(temperature=0.7))
    assert not engine.has_unfinished()
    with pytest.raises(ConfigError, match="speculative_method = 'draft': smollm2-135m runs for real"):
        make_smollm_engine(speculative_method="draft")
    with pytest.raises(ConfigError, match="speculative_method = 'ngram': a simulated GPU"):
        LLMEngine(EngineConfig(model="simulated:llama-3-8b@h100-80gb", speculative_method="ngram"))
    for bad, message in (
        ({"speculative_method": "eagle"}, "speculative_method: expected one of off, ngram, draft, got 'eagle'"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens: expected an integer from 1 to 64, got 0"),
        (
            {"prompt_lookup_min": 3, "prompt_lookup_max": 2},
            r"prompt_lookup_min: expected at most prompt_lookup_max \(2\), got 3",
        ),
        ({"draft_acceptance_rate": 1.5}, r"draft_acceptance_rate: expected a number in \[0, 1\], got 1.5"),
    ):
        with pytest.raises(ConfigError, match=message):
            EngineConfig(**bad)


def test_serve_takes_vllms_speculative_config_and_refuses_what_it_does_not_know():
    parser = argparse.ArgumentParser()
    add_engine_options(parser)
    args = parser.parse_args(["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 5}'])
    args.command = "serve"
    config = engine_config(args)
    assert (config.speculative_method, config.num_speculative_tokens) == ("ngram", 5)
    with pytest.raises(ConfigError, match="--speculative-config: unknown keys model; expected some of method, "):
        speculative_overrides('{"method": "draft", "model": "meta-llama/Llama-3.2-1B"}')
    with pytest.raises(ConfigError, match="--speculative-config: expected a JSON object, got 'ngram'"):
        speculative_overrides("ngram")
    for no_method in ("{}", '{"num_speculative_tokens": 3}'):  # issue 77 #13: speculation stayed off, unsaid
        with pytest.raises(ConfigError, match=r'--speculative-config: expected a "method" \(ngram; draft'):
            speculative_overrides(no_method)
    with pytest.raises(ConfigError, match="speculative_method: expected one of off, ngram, draft, got 'eagle'"):
        args.speculative_config = '{"method": "eagle"}'
        engine_config(args)


def _simulated_run(requests: int, **speculation) -> tuple[float, float, LLMEngine]:
    """`requests` x (200 + 64) tokens at once on a simulated GPU: TPOT p50 (ms) and output tok/s."""
    engine = LLMEngine(EngineConfig(model="simulated:llama-3-8b@h100-80gb", **speculation))
    outputs = engine.generate([[1] * 200] * requests, SamplingParams(max_tokens=64, ignore_eos=True))
    tpot = sorted(output.metrics.tpot_ms for output in outputs)[len(outputs) // 2]
    return tpot, sum(len(output.token_ids) for output in outputs) / engine.clock(), engine


def test_a_simulated_draft_model_accepts_at_its_rate_and_charges_its_steps():
    """Tokens per speculating step follow (1 - a^(k+1)) / (1 - a) within the sampling error of the
    steps run; a draft the target never agrees with only costs (more time per token than plain
    decoding), one it always agrees with cuts TPOT at one stream."""
    rate, k = 0.7, 4
    _, _, engine = _simulated_run(32, speculative_method="draft", num_speculative_tokens=k, draft_acceptance_rate=rate)
    scheduler = engine.scheduler
    expected = (1 - rate ** (k + 1)) / (1 - rate)
    # Steps whose proposals max_tokens cut short accept fewer: the run's mean stays within 10%.
    assert (scheduler.num_drafts + scheduler.num_accepted_tokens) / scheduler.num_drafts == pytest.approx(
        expected, rel=0.1
    )
    plain_tpot, _, _ = _simulated_run(1)
    never_tpot, _, _ = _simulated_run(1, speculative_method="draft", draft_acceptance_rate=0.0)
    always_tpot, _, _ = _simulated_run(1, speculative_method="draft", draft_acceptance_rate=1.0)
    assert never_tpot > plain_tpot > always_tpot


def test_the_heuristic_schedule_shortens_rejected_proposals_and_keeps_accepted_ones_long():
    """transformers' heuristic, per sequence: one stream of 64 tokens on a simulated GPU, up to 4
    proposals a step. A draft never agreed with drops to 1 proposal a step after 3 steps (4, 3, 2,
    then 1s) and so costs less than at a constant 4; one always agreed with stays at 4."""
    draft = dict(speculative_method="draft", num_speculative_tokens=4)
    never_constant, _, _ = _simulated_run(1, **draft, draft_acceptance_rate=0.0)
    never, _, engine = _simulated_run(
        1, **draft, draft_acceptance_rate=0.0, num_speculative_tokens_schedule="heuristic"
    )
    scheduler = engine.scheduler
    assert scheduler.num_draft_tokens == 4 + 3 + 2 + (scheduler.num_drafts - 3)
    assert never < never_constant
    _, _, engine = _simulated_run(1, **draft, draft_acceptance_rate=1.0, num_speculative_tokens_schedule="heuristic")
    assert engine.scheduler.num_draft_tokens / engine.scheduler.num_drafts > 3.5  # the last steps: max_tokens


def test_next_proposal_limit_adds_two_after_all_accepted_and_takes_one_after_a_rejection():
    assert [next_proposal_limit(limit, True, 5) for limit in (1, 3, 4, 5)] == [3, 5, 5, 5]
    assert [next_proposal_limit(limit, False, 5) for limit in (1, 2, 5)] == [1, 1, 4]
