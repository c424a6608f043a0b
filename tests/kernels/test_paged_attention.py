"""Paged attention equals plain causal attention on contiguous K/V, for uneven lengths, scattered
blocks, GQA ratios 1, 3 and 5, and with a sliding window (shorter and longer than the contexts); decode
both through the CPU operator that reads blocks in place and through the gathering torch path. The
CPU operator's two ways through a chunk are both held: head_dim 24 takes the portable one, 64 and
80 (four column groups of 16, then one) the AVX-512 one where the build has it."""

from __future__ import annotations

import pytest
import torch

from kernels import cpu_operators
from kernels.paged_attention import (
    gather_decode_attention,
    length_buckets,
    paged_decode_attention,
    paged_prefill_attention,
)
from tests.kernels.references import BLOCK_SIZE, HEAD_DIM, scattered_cache


def dense_attention(query, keys, values, query_positions, window=None):
    """query [n, heads, d] at the given positions; keys/values [context, kv_heads, d]; with a
    window, each query sees only the `window` positions ending at its own."""
    group = query.shape[1] // keys.shape[1]
    keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", query, keys) / query.shape[-1] ** 0.5
    visible = torch.arange(keys.shape[0])[None, :] <= query_positions[:, None]
    if window is not None:
        visible &= torch.arange(keys.shape[0])[None, :] > query_positions[:, None] - window
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), values)


@pytest.mark.parametrize("head_dim", [24, 64, 80])
@pytest.mark.parametrize("window", [None, 16, 512])
@pytest.mark.parametrize("kv_heads, group", [(2, 1), (2, 3), (1, 5)])
@pytest.mark.parametrize("lengths", [[1], [5, 1, 17, 8, 4], [33], [33, 33], [3, 1500, 7, 700, 2900, 40]])
def test_decode_matches_dense(kv_heads, group, lengths, window, head_dim):
    assert cpu_operators.available(), cpu_operators.unavailable_reason()
    generator = torch.Generator().manual_seed(len(lengths) * 10 + group)
    key_cache, value_cache, tables, contents = scattered_cache(lengths, kv_heads, generator, head_dim)
    query = torch.randn(len(lengths), kv_heads * group, head_dim, generator=generator)
    widest = max(len(table) for table in tables)
    block_tables = torch.tensor([table + [0] * (widest - len(table)) for table in tables])
    context_lens, scale = torch.tensor(lengths), head_dim**-0.5
    outputs = [
        # Gathered: grouped by length (the eager path) and as one masked group (the compiled path).
        gather_decode_attention(
            query,
            key_cache,
            value_cache,
            block_tables,
            context_lens,
            scale,
            length_buckets(lengths, BLOCK_SIZE, query.device),
            window,
        ),
        gather_decode_attention(query, key_cache, value_cache, block_tables, context_lens, scale, None, window),
        # In place (contexts over 1,024 positions split into chunks and merged).
        paged_decode_attention(query, key_cache, value_cache, block_tables, context_lens, scale, None, window),
    ]
    for out in outputs:
        for index, (length, (keys, values)) in enumerate(zip(lengths, contents)):
            expected = dense_attention(query[index : index + 1], keys, values, torch.tensor([length - 1]), window)
            torch.testing.assert_close(out[index : index + 1], expected, rtol=1e-5, atol=1e-5)


def test_the_cpu_decode_reads_the_blocks_in_place_when_its_operator_builds():
    assert cpu_operators.available(), cpu_operators.unavailable_reason()
    generator = torch.Generator().manual_seed(7)
    key_cache, value_cache, tables, _ = scattered_cache([40], 1, generator)
    query = torch.randn(1, 3, HEAD_DIM, generator=generator)
    arguments = (query, key_cache, value_cache, torch.tensor(tables), torch.tensor([40]), HEAD_DIM**-0.5)
    with torch.profiler.profile() as profile:
        paged_decode_attention(*arguments)
    names = {event.name for event in profile.events()}
    assert "workbench::paged_decode_attention" in names and "aten::index_select" not in names


@pytest.mark.parametrize("query_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [24, 64])
@pytest.mark.parametrize("window", [None, 512])
def test_the_cpu_operator_on_a_bfloat16_cache_matches_the_gathering_path(window, head_dim, query_dtype):
    """The engine's default KV dtype: bfloat16 keys and values, with a float32 query (the eager
    path) or a bfloat16 one (the compiled bf16 copy); one long context (four chunks) beside short
    ones."""
    assert cpu_operators.available(), cpu_operators.unavailable_reason()
    generator = torch.Generator().manual_seed(3)
    lengths = [4000, 9, 300]
    key_cache, value_cache, tables, _ = scattered_cache(lengths, 3, generator, head_dim)
    key_cache, value_cache = key_cache.bfloat16(), value_cache.bfloat16()
    query = torch.randn(len(lengths), 9, head_dim, generator=generator).to(query_dtype)
    widest = max(len(table) for table in tables)
    block_tables = torch.tensor([table + [0] * (widest - len(table)) for table in tables])
    arguments = (query, key_cache, value_cache, block_tables, torch.tensor(lengths), head_dim**-0.5)
    expected = gather_decode_attention(*arguments, None, window)
    actual = paged_decode_attention(*arguments, None, window)
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("window", [None, 4, 6])
@pytest.mark.parametrize("kv_heads, group", [(2, 1), (1, 3)])
@pytest.mark.parametrize("context_len, num_new", [(7, 7), (13, 5), (16, 1), (9, 8), (70, 6), (70, 30)])
def test_prefill_chunk_matches_dense(kv_heads, group, context_len, num_new, window):
    generator = torch.Generator().manual_seed(context_len * 100 + num_new)
    key_cache, value_cache, tables, contents = scattered_cache([context_len], kv_heads, generator)
    keys, values = contents[0]
    query = torch.randn(num_new, kv_heads * group, HEAD_DIM, generator=generator)
    out = paged_prefill_attention(
        query,
        keys[-num_new:],
        values[-num_new:],
        key_cache,
        value_cache,
        torch.tensor(tables[0]),
        context_len,
        HEAD_DIM**-0.5,
        window,
    )
    expected = dense_attention(query, keys, values, torch.arange(context_len - num_new, context_len), window)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
