"""Every Triton kernel against its torch reference, on shapes with edges: sizes that are not
multiples of the tiles, one sequence, many of uneven length, GQA ratios 1 and 3. On a machine
without a GPU they run in Triton's interpreter (TRITON_INTERPRET=1, see conftest.py)."""

from __future__ import annotations

import pytest
import torch

from kernels.paged_attention import _decode_bucket
from kernels.quant import quantize_int4, quantize_int8
from kernels.quant_matmul import int4_matmul_reference, int8_matmul_reference, w8a8_matmul_reference
from kernels.quantized_kv import QuantizedKv, quantize_rows
from kernels.triton_paged_attention import paged_decode_attention_triton
from kernels.triton_quant_matmul import int4_matmul_triton, int8_matmul_triton, w8a8_matmul_triton
from tests.kernels.references import BLOCK_SIZE, HEAD_DIM, relative_error, scattered_cache

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("rows, width, depth", [(1, 96, 128), (3, 100, 192), (16, 64, 576), (40, 70, 256)])
def test_int8_matmul_matches_reference(rows, width, depth):
    generator = torch.Generator().manual_seed(rows + width)
    weight, x = torch.randn(width, depth, generator=generator), torch.randn(rows, depth, generator=generator)
    q, scales = quantize_int8(weight)
    actual = int8_matmul_triton(x.to(DEVICE), q.to(DEVICE), scales.to(DEVICE)).cpu()
    assert relative_error(actual, int8_matmul_reference(x, q, scales)) < 1e-5


@pytest.mark.parametrize("rows, width, depth", [(1, 96, 128), (17, 100, 192), (64, 70, 576)])
def test_w8a8_matmul_matches_reference(rows, width, depth):
    generator = torch.Generator().manual_seed(rows * width)
    weight, x = torch.randn(width, depth, generator=generator), torch.randn(rows, depth, generator=generator)
    x[0, 3] = 40.0  # an outlier: its row's scale grows, the other rows' must not
    q, scales = quantize_int8(weight)
    actual = w8a8_matmul_triton(x.to(DEVICE), q.to(DEVICE), scales.to(DEVICE)).cpu()
    assert relative_error(actual, w8a8_matmul_reference(x, q, scales)) < 1e-5


@pytest.mark.parametrize(
    "rows, width, depth, group_size", [(1, 96, 128, 32), (5, 100, 192, 64), (33, 64, 256, 128), (2, 192, 576, 32)]
)
def test_int4_matmul_matches_reference(rows, width, depth, group_size):
    generator = torch.Generator().manual_seed(rows * depth)
    weight, x = torch.randn(width, depth, generator=generator), torch.randn(rows, depth, generator=generator)
    packed, scales, minimums = quantize_int4(weight, group_size)
    actual = int4_matmul_triton(
        x.to(DEVICE), packed.to(DEVICE), scales.to(DEVICE), minimums.to(DEVICE), group_size
    ).cpu()
    assert relative_error(actual, int4_matmul_reference(x, packed, scales, minimums, group_size)) < 1e-5


@pytest.mark.parametrize("kv_heads, group", [(2, 1), (1, 3), (3, 3)])
@pytest.mark.parametrize("lengths", [[1], [5, 1, 17, 8, 4, 33], [64]])
def test_paged_decode_attention_matches_reference(kv_heads, group, lengths):
    generator = torch.Generator().manual_seed(sum(lengths) + group)
    key_cache, value_cache, tables, _ = scattered_cache(lengths, kv_heads, generator)
    query = torch.randn(len(lengths), kv_heads * group, HEAD_DIM, generator=generator)
    widest = max(len(table) for table in tables)
    block_tables = torch.tensor([table + [0] * (widest - len(table)) for table in tables])
    context_lens = torch.tensor(lengths)
    expected = _decode_bucket(query, key_cache, value_cache, block_tables, context_lens, HEAD_DIM**-0.5, None)
    actual = paged_decode_attention_triton(
        query.to(DEVICE),
        key_cache.to(DEVICE),
        value_cache.to(DEVICE),
        block_tables.to(DEVICE),
        context_lens.to(DEVICE),
        HEAD_DIM**-0.5,
    ).cpu()
    assert BLOCK_SIZE == 4 and relative_error(actual, expected) < 1e-5


@pytest.mark.parametrize("code_dtype", [torch.int8, torch.float8_e4m3fn])
@pytest.mark.parametrize("lengths", [[1], [5, 1, 17, 8, 4, 33]])
def test_paged_decode_attention_on_an_8bit_cache_matches_the_gathering_path(lengths, code_dtype):
    """Codes and per-row scales (kernels/quantized_kv.py), dequantized in the kernel, against the
    torch path that dequantizes the gathered rows first."""
    generator = torch.Generator().manual_seed(len(lengths))
    key_cache, value_cache, tables, _ = scattered_cache(lengths, 3, generator)
    key_cache, value_cache = (QuantizedKv(*quantize_rows(cache * 4, code_dtype)) for cache in (key_cache, value_cache))
    query = torch.randn(len(lengths), 9, HEAD_DIM, generator=generator)
    widest = max(len(table) for table in tables)
    block_tables = torch.tensor([table + [0] * (widest - len(table)) for table in tables])
    context_lens = torch.tensor(lengths)
    expected = _decode_bucket(query, key_cache, value_cache, block_tables, context_lens, HEAD_DIM**-0.5, None)
    on_device = [QuantizedKv(*(part.to(DEVICE) for part in cache)) for cache in (key_cache, value_cache)]
    actual = paged_decode_attention_triton(
        query.to(DEVICE), *on_device, block_tables.to(DEVICE), context_lens.to(DEVICE), HEAD_DIM**-0.5
    ).cpu()
    assert relative_error(actual, expected) < 1e-5
