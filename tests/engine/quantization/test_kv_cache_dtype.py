"""kv_cache_dtype: a bf16 cache on a float32 engine holds half the bytes per token, and the
engine's logits stay within bf16 rounding of the float32 cache's, prefill and decode alike."""

from __future__ import annotations

import torch

from engine import SamplingParams
from kernels.quantized_kv import dequantize
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


def test_an_fp8_cache_holds_the_keys_as_computed_unrotated_and_int8_holds_them_rotated(tiny_llama):
    """fp8 keys are stored as they are (kernels/quantized_kv.py says why: rotated, Gemma 3's KL
    doubled); int8 keys rotated. Each 8-bit cache's rows, read back, against a float32 cache's
    after the same prefill: fp8 within its rounding (3 mantissa bits: 1/16 of a row's largest),
    int8 a rotation away. A planted fp8 rotation passed every other test."""
    directory, _ = tiny_llama
    reference, fp8, int8 = (tiny_engine(directory, kv_cache_dtype=kv) for kv in ("float32", "fp8_e4m3", "int8"))
    for engine in (reference, fp8, int8):
        engine.generate([PROMPTS[3]], SamplingParams(max_tokens=1, temperature=0.0))
    expected = reference.executor.kv_caches[0][0]
    written = expected.abs().amax(dim=-1) > 0  # the rows the prefill wrote
    assert written.sum() >= len(PROMPTS[3])
    for engine, rotated in ((fp8, False), (int8, True)):
        cache = engine.executor.kv_caches[0][0]
        keys = dequantize(cache.codes, cache.scales, torch.float32)[written]
        rows = expected[written]
        error = (keys - rows).abs().amax(dim=-1) / rows.abs().amax(dim=-1)
        assert (error.max().item() > 0.5) if rotated else (error.max().item() <= 1 / 16), error.max().item()
