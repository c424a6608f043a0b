"""The 8-bit KV caches (kernels/quantized_kv.py): rows rounded with a float16 scale of their own
come back within half a step (int8) or a sixteenth of themselves (fp8 e4m3); every fp8 code reads
back as torch's float8 cast says; the CPU operator reading codes and scales in place equals the
gathering path that dequantizes first, on both of the operator's ways through a chunk (head_dim 24
portable, 64 AVX-512), with a window, long contexts and a bfloat16 query; writes land in the
slots asked for; prefill attends to the rows as the cache holds them."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import cpu_operators
from kernels.paged_attention import (
    gather_decode_attention,
    paged_decode_attention,
    paged_prefill_attention,
    write_kv_cache,
)
from kernels.quantized_kv import QuantizedKv, bytes_per_row, dequantize, key_rotation, key_transforms, quantize_rows
from tests.kernels.references import scattered_cache

CODE_DTYPES = [torch.int8, torch.float8_e4m3fn]


def as_8bit_cache(cache: torch.Tensor, code_dtype: torch.dtype) -> QuantizedKv:
    return QuantizedKv(*quantize_rows(cache, code_dtype))


def random_rows(rows: int, head_dim: int, magnitude: float, seed: int) -> torch.Tensor:
    return torch.randn(rows, head_dim, generator=torch.Generator().manual_seed(seed)) * magnitude


ANY_ROWS = st.builds(
    random_rows, st.integers(1, 6), st.sampled_from([8, 24, 64, 256]), st.floats(1e-3, 1e3), st.integers(0, 2**16)
)


@settings(max_examples=60, deadline=None)
@given(values=ANY_ROWS)
def test_a_row_comes_back_within_half_a_step_and_its_largest_number_exactly(values):
    codes, scales = quantize_rows(values, torch.int8)
    restored = dequantize(codes, scales, torch.float32)
    step = scales.float().unsqueeze(-1)
    assert codes.dtype == torch.int8 and scales.dtype == torch.float16
    assert bool(((restored - values).abs() <= step / 2 * (1 + 1e-3) + 127 * step * 2**-11).all())
    assert int(codes.abs().max()) <= 127


@settings(max_examples=60, deadline=None)
@given(values=ANY_ROWS)
def test_an_fp8_number_comes_back_within_a_sixteenth_of_itself(values):
    """Three mantissa bits: half a step is at most 2^-4 of the number; below 2^-6 (subnormal codes)
    the step is 2^-9 of the scale; the float16 scale's own rounding moves the largest by 2^-11."""
    codes, scales = quantize_rows(values, torch.float8_e4m3fn)
    restored = dequantize(codes, scales, torch.float32)
    scale = scales.float().unsqueeze(-1)
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.float16
    bound = values.abs() * 2**-4 + scale * 2**-10 + 448 * scale * 2**-10
    assert bool(((restored - values).abs() <= bound * (1 + 1e-3)).all())
    assert float(codes.float().abs().max()) <= 448


def _keys_with_channel_gains(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries and keys [64, 64] whose key channels a norm's gains scale, a few of them 30x (as
    Gemma 3's k_norm does), one silenced; and the gains."""
    gains = torch.ones(64)
    gains[[3, 35, 17]] = 30.0
    gains[40] = 0.0
    queries = torch.randn(64, 64, generator=generator, dtype=torch.float64)
    keys = torch.randn(64, 64, generator=generator, dtype=torch.float64) * gains.double()
    return queries, keys, gains


def test_the_key_and_query_transforms_keep_every_score():
    queries, keys, gains = _keys_with_channel_gains(torch.Generator().manual_seed(3))
    rotation = key_rotation(64, torch.float64, torch.device("cpu"))
    for key_gains in (gains, None):
        for_keys, for_queries = key_transforms(rotation, key_gains)
        torch.testing.assert_close((queries @ for_queries) @ (keys @ for_keys).T, queries @ keys.T)


def test_balancing_the_key_channels_makes_int8_scores_closer():
    """Rounded to int8 after the transforms, the scores' error is smaller with the gains balanced
    than with the rotation alone (the largest channels otherwise set every row's step)."""
    queries, keys, gains = _keys_with_channel_gains(torch.Generator().manual_seed(4))
    rotation = key_rotation(64, torch.float64, torch.device("cpu"))
    exact = queries @ keys.T

    def score_error(key_gains):
        for_keys, for_queries = key_transforms(rotation, key_gains)
        rounded = dequantize(*quantize_rows((keys @ for_keys).float(), torch.int8), torch.float64)
        return ((queries @ for_queries) @ rounded.T - exact).pow(2).mean().sqrt().item()

    assert score_error(gains) < 0.8 * score_error(None)


@pytest.mark.parametrize("code_dtype", CODE_DTYPES)
def test_an_all_zero_row_stays_zero_and_a_row_costs_its_codes_and_one_scale(code_dtype):
    codes, scales = quantize_rows(torch.zeros(2, 64), code_dtype)
    assert not codes.float().any() and bool(torch.isfinite(scales).all())
    assert bytes_per_row(64) == 66 and 2 * 64 / bytes_per_row(64) >= 1.9


@pytest.mark.parametrize("code_dtype", CODE_DTYPES)
@pytest.mark.parametrize("query_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [24, 64])
@pytest.mark.parametrize("window", [None, 512])
def test_the_cpu_operator_on_an_8bit_cache_matches_the_gathering_path(window, head_dim, query_dtype, code_dtype):
    assert cpu_operators.available(), cpu_operators.unavailable_reason()
    generator = torch.Generator().manual_seed(5)
    lengths = [4000, 9, 300, 1]
    key_cache, value_cache, tables, _ = scattered_cache(lengths, 3, generator, head_dim)
    key_cache, value_cache = as_8bit_cache(key_cache * 4, code_dtype), as_8bit_cache(value_cache, code_dtype)
    query = torch.randn(len(lengths), 9, head_dim, generator=generator).to(query_dtype)
    widest = max(len(table) for table in tables)
    block_tables = torch.tensor([table + [0] * (widest - len(table)) for table in tables])
    rest = (key_cache, value_cache, block_tables, torch.tensor(lengths), head_dim**-0.5, None, window)
    # The gathering path computes in the query's dtype; the operator in float32 whatever the query's.
    expected = gather_decode_attention(query.float(), *rest).to(query_dtype)
    actual = paged_decode_attention(query, *rest)
    torch.testing.assert_close(
        actual,
        expected,
        rtol=1e-5 if query_dtype == torch.float32 else None,
        atol=1e-5 if query_dtype == torch.float32 else None,
    )


@pytest.mark.parametrize("head_dim", [8, 256])  # the portable way, and AVX-512's
def test_the_cpu_operator_reads_every_fp8_code_as_torch_casts_it(head_dim):
    """A one-position context's output is its value row: rows holding each of the 254 codes that
    are numbers (0x7f and 0xff are NaN, which no cache holds), subnormals and +-448 among them."""
    assert cpu_operators.available(), cpu_operators.unavailable_reason()
    every_code = torch.arange(256, dtype=torch.uint8)
    every_code[every_code.view(torch.float8_e4m3fn).float().isnan()] = 0
    num_seqs = 256 // head_dim
    codes = every_code.view(torch.float8_e4m3fn).view(num_seqs, 1, 1, head_dim)
    cache = QuantizedKv(codes, torch.ones(num_seqs, 1, 1, dtype=torch.float16))
    rows = torch.arange(num_seqs)
    out = torch.ops.workbench.paged_decode_attention(
        torch.randn(num_seqs, 1, head_dim),
        cache.codes,
        cache.codes,
        rows[:, None],
        torch.ones(num_seqs, dtype=torch.long),
        1.0,
        0,
        cache.scales,
        cache.scales,
    )
    assert torch.equal(out.view(-1), every_code.view(torch.float8_e4m3fn).float())


def test_the_operator_refuses_an_8bit_cache_without_its_scales():
    assert cpu_operators.available(), cpu_operators.unavailable_reason()
    codes = torch.zeros(2, 4, 1, 8, dtype=torch.int8)
    with pytest.raises(RuntimeError, match="8-bit caches need scales"):
        torch.ops.workbench.paged_decode_attention(
            torch.zeros(1, 1, 8),
            codes,
            codes,
            torch.zeros(1, 1, dtype=torch.long),
            torch.ones(1, dtype=torch.long),
            1.0,
            0,
        )


@pytest.mark.parametrize("code_dtype", CODE_DTYPES)
def test_writes_land_in_their_slots_and_prefill_reads_what_the_cache_holds(code_dtype):
    generator = torch.Generator().manual_seed(9)
    key_cache, value_cache = (
        QuantizedKv.zeros((4, 4, 2, 16), code_dtype, torch.device("cpu")),
        QuantizedKv.zeros((4, 4, 2, 16), code_dtype, torch.device("cpu")),
    )
    keys, values = torch.randn(6, 2, 16, generator=generator), torch.randn(6, 2, 16, generator=generator)
    slots = torch.tensor([8, 9, 10, 11, 12, 2])  # positions 0-4 in blocks 2 and 3, then one in block 0
    write_kv_cache(keys, values, key_cache, value_cache, slots)
    for cache, rows in ((key_cache, keys), (value_cache, values)):
        stored = dequantize(cache.codes.view(-1, 2, 16)[slots], cache.scales.view(-1, 2)[slots], torch.float32)
        torch.testing.assert_close(stored, dequantize(*quantize_rows(rows, code_dtype), torch.float32))
        assert not cache.codes.view(-1, 2, 16)[[0, 1, 3, 4, 5, 6, 7, 13, 14, 15]].float().any()
    # A first chunk attends to its fresh rows as the cache holds them, as a later chunk reads them back.
    query = torch.randn(5, 4, 16, generator=generator)
    written = torch.tensor([2, 3])  # the block table of positions 0-4
    fresh = paged_prefill_attention(query, keys[:5], values[:5], key_cache, value_cache, written, 5, 0.25)
    cached = paged_prefill_attention(query[4:], keys[4:5], values[4:5], key_cache, value_cache, written, 5, 0.25)
    torch.testing.assert_close(fresh[4:], cached, rtol=1e-5, atol=1e-6)
