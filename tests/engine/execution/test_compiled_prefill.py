"""The compiled prefill halves (engine/execution/compiled_prefill.py): steps that prefill, alone, chunked
and beside decodes, give the eager path's logits and tokens through them, on a Llama and on a
Gemma 3 (sandwich norms, q/k norms, sliding-window layers with their own RoPE)."""

from __future__ import annotations

import pytest
import torch

import engine.execution.compiled_prefill
from engine import SamplingParams
from tests.tiny_models import record_logits, save_tiny_model, tiny_engine

pytestmark = pytest.mark.slow  # compiling takes tens of seconds on two cores

GREEDY = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
# A prompt of 41 tokens prefills in chunks of 16, 16 and 9 (long_prompt_threshold), each reading
# the ones before from the cache; the short ones prefill beside its chunks and then decode beside them.
PROMPTS = [list(range(3, 44)), [5, 9, 2, 40, 7], [11, 12]]
SETTINGS = dict(long_prompt_threshold=16, max_long_prefills=1)


def logits_of_every_step(engine) -> tuple[list[torch.Tensor], list[list[int]]]:
    """Greedy-generate PROMPTS together, recording each step's logits."""
    recorded = record_logits(engine)
    outputs = engine.generate(PROMPTS, GREEDY)
    return recorded, [output.token_ids for output in outputs]


@pytest.mark.parametrize("architecture", ["llama", "gemma3"])
def test_steps_that_prefill_give_the_eager_logits_through_the_compiled_halves(tmp_path, architecture, monkeypatch):
    save_tiny_model(tmp_path, architecture, num_kv_heads=2)
    expected_logits, expected_tokens = logits_of_every_step(tiny_engine(tmp_path, **SETTINGS))

    compiled = tiny_engine(tmp_path, compile_decode="blocking", **SETTINGS)
    assert compiled.executor.prefill_mode == "compiled halves"
    calls = []
    count_calls = engine.execution.compiled_prefill._dynamic_rows  # every call of a compiled half passes here

    def counting(*tensors):
        calls.append(tensors[0].shape[0])
        count_calls(*tensors)

    monkeypatch.setattr(engine.execution.compiled_prefill, "_dynamic_rows", counting)
    logits, tokens = logits_of_every_step(compiled)

    assert tokens == expected_tokens
    assert len(logits) == len(expected_logits)
    for step, (got, want) in enumerate(zip(logits, expected_logits)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda text: f"step {step}: {text}")
    layers = compiled.model_config.num_layers
    # Three steps prefill (one chunk of the long prompt each; the short prompts join the first),
    # each through both halves of every layer, with every row of the step.
    assert calls[: 2 * layers] == [16 + 5 + 2] * 2 * layers
    assert len(calls) == 3 * 2 * layers
    assert compiled.executor.prefill_mode == "compiled halves"


def test_a_failed_prefill_step_runs_again_eagerly_and_prefill_stays_eager(tiny_llama, monkeypatch):
    directory, _ = tiny_llama
    expected_logits, expected_tokens = logits_of_every_step(tiny_engine(directory, **SETTINGS))
    compiled = tiny_engine(directory, compile_decode="blocking", **SETTINGS)

    def broken(*tensors):
        raise RuntimeError("a shape the compiler cannot handle")

    monkeypatch.setattr(engine.execution.compiled_prefill, "_dynamic_rows", broken)
    with pytest.warns(RuntimeWarning, match="prefill step: eager \\(compile failed: RuntimeError: a shape"):
        logits, tokens = logits_of_every_step(compiled)
    assert tokens == expected_tokens
    for got, want in zip(logits, expected_logits):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert compiled.executor.prefill_mode.startswith("eager (compile failed: RuntimeError")
    assert compiled.executor.decode_mode == "compiled"  # the decode graph is not the prefill halves'
