"""The engine's decoder equals transformers' on tiny random Llama (plain, with Llama 3's and with
linear RoPE scaling), Qwen2, Qwen3, Mistral (a 5-token sliding window) and Gemma 3 checkpoints:
prefill, chunked prefill and step-by-step decode through the paged cache, in float32."""

from __future__ import annotations

import pytest
import torch

from engine import SamplingParams
from tests.tiny_models import NEW_TOKENS, PROMPT, engine_logits, save_tiny_model, tiny_engine


@pytest.mark.parametrize(
    "architecture, num_kv_heads, tie",
    [
        ("llama", 2, False),
        ("llama", 6, True),
        ("qwen2", 2, False),
        ("qwen2", 3, True),
        ("qwen3", 2, True),
        ("llama3-rope", 2, False),
        ("llama-linear-rope", 3, True),
        ("mistral", 2, False),
        ("gemma3", 1, True),
        ("gemma3", 3, False),
        ("gemma3-linear-rope", 2, True),
    ],
)
@pytest.mark.parametrize("max_num_batched_tokens", [64, 5])  # one-shot prefill, then 5-token chunks
def test_logits_match_transformers(tmp_path, architecture, num_kv_heads, tie, max_num_batched_tokens):
    reference = save_tiny_model(tmp_path, architecture, num_kv_heads, tie)
    engine = tiny_engine(tmp_path, max_num_batched_tokens=max_num_batched_tokens, long_prompt_threshold=0)

    logits, generated = engine_logits(engine, PROMPT)

    with torch.no_grad():
        full = torch.tensor([PROMPT + generated])
        expected = reference(full).logits[0, len(PROMPT) - 1 : len(PROMPT) - 1 + NEW_TOKENS]
    assert logits.shape == expected.shape
    assert (logits - expected).abs().max().item() <= 1e-4
    assert generated == expected.argmax(-1).tolist()


def test_batched_requests_match_transformers_per_sequence(tiny_llama):
    directory, reference = tiny_llama
    engine = tiny_engine(directory, max_num_batched_tokens=16, long_prompt_threshold=0)
    prompts = [PROMPT[:length] for length in (1, 4, 9, 13)] + [PROMPT[::-1]]
    outputs = engine.generate(prompts, SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True))
    for prompt, output in zip(prompts, outputs):
        with torch.no_grad():
            expected = reference.generate(torch.tensor([prompt]), max_new_tokens=5, do_sample=False, min_new_tokens=5)
        assert output.token_ids == expected[0, len(prompt) :].tolist()
