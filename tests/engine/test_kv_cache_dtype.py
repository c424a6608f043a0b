"""kv_cache_dtype: a bf16 cache on a float32 engine holds half the bytes per token, and the
engine's logits stay within bf16 rounding of the float32 cache's, prefill and decode alike."""

from __future__ import annotations

import torch

from engine import SamplingParams
from tests.tiny_models import tiny_engine

PROMPTS = [[5, 9, 2, 40, 7], [3] * 19, [11, 12], list(range(1, 38))]


def test_a_bf16_cache_halves_the_bytes_and_keeps_the_logits_close(tiny_llama):
    directory, _ = tiny_llama
    full = tiny_engine(directory)
    half = tiny_engine(directory, kv_cache_dtype="bfloat16")
    assert half.executor.kv_caches[0][0].dtype == torch.bfloat16 and half.dtype == torch.float32
    assert 2 * half.kv_bytes_per_token == full.kv_bytes_per_token and 2 * half.kv_cache_bytes == full.kv_cache_bytes
    for prompt in PROMPTS:  # a whole prompt in one prefill: keys written, then read back as bf16
        expected = full.executor.sequence_logits(prompt, full.config.block_size)
        got = half.executor.sequence_logits(prompt, half.config.block_size)
        torch.testing.assert_close(got, expected, rtol=0.05, atol=0.05 * expected.abs().max().item())
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    # Decode steps read the cache: the first token comes from the prefill, the rest from decode.
    outputs = half.generate(PROMPTS, greedy)
    assert all(len(output.token_ids) == 6 for output in outputs)
    agreeing = sum(a.token_ids[:2] == b.token_ids[:2] for a, b in zip(outputs, full.generate(PROMPTS, greedy)))
    assert agreeing >= len(PROMPTS) - 1
