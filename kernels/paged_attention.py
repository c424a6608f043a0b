"""Attention over a paged KV cache (torch reference implementation).

Cache layout, per layer: key_cache and value_cache of shape [num_blocks, block_size, kv_heads, head_dim].
A sequence's tokens live in the blocks its block table lists, in order; token at position p sits in
block block_table[p // block_size], slot p % block_size.

Sliding-window layers pass `window`: a query at position p sees keys at positions p - window + 1
to p (Gemma 3's and Mistral's rule, as transformers and llama.cpp apply it).

Grouped-query attention: query head h reads kv head h // (num_heads // kv_heads), the Hugging Face
layout. Decode views queries as [kv_heads, group, ...] and prefill passes enable_gqa to SDPA, so
K/V are never materialised per query head.

An 8-bit cache (int8 or fp8 codes, kernels/quantized_kv.py) passes a QuantizedKv for each of key_cache and
value_cache: its codes have the layout above, its scales the same without head_dim. Attention
then runs in the query's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels import cpu_operators
from kernels.quantized_kv import QuantizedKv, dequantize, quantize_rows


def write_kv_cache(
    key: torch.Tensor,  # [num_tokens, kv_heads, head_dim]
    value: torch.Tensor,
    key_cache: torch.Tensor | QuantizedKv,  # [num_blocks, block_size, kv_heads, head_dim]
    value_cache: torch.Tensor | QuantizedKv,
    slot_mapping: torch.Tensor,  # [num_tokens], block_id * block_size + offset
) -> None:
    if isinstance(key_cache, QuantizedKv):
        for rows, cache in ((key, key_cache), (value, value_cache)):
            codes, scales = quantize_rows(rows, cache.codes.dtype)
            _write_slots(cache.codes, codes, slot_mapping)
            _write_slots(cache.scales, scales, slot_mapping)
        return
    _write_slots(key_cache, key.to(key_cache.dtype), slot_mapping)
    _write_slots(value_cache, value.to(value_cache.dtype), slot_mapping)


def _write_slots(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """rows[i] into the slot slot_mapping[i] of cache [num_blocks, block_size, ...]."""
    if torch.compiler.is_compiling():
        # Indexed on the cache tensor itself, not through a flattening view: in a compiled graph a
        # tensor that several layers write (KV groups share the pool's tensors) then stays written
        # in place; through the view, inductor copied every shared tensor each step (tests/engine/
        # test_compiled_decode.py, docs/measurements.md).
        block_size = cache.shape[1]
        cache.index_put_((slot_mapping // block_size, slot_mapping % block_size), rows)
    else:  # eagerly the view's index_copy_ is the faster write (docs/measurements.md)
        if cache.dtype == torch.float8_e4m3fn:  # which index_copy_ has no CPU kernel for: copied as bytes
            cache, rows = cache.view(torch.uint8), rows.view(torch.uint8)
        cache.view(-1, *cache.shape[2:]).index_copy_(0, slot_mapping, rows)


def paged_decode_attention(
    query: torch.Tensor,  # [num_seqs, num_heads, head_dim]: one new token per sequence
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [num_seqs, max_blocks], padded with any valid block id
    context_lens: torch.Tensor,  # [num_seqs], tokens in each sequence's context, the new one included
    scale: float,
    buckets: list | None = None,  # length_buckets(...), computed once per step rather than per layer
    window: int | None = None,
) -> torch.Tensor:
    """Reads K/V in place through the block tables where an operator for the device exists: on
    CUDA the Triton kernel, on the CPU the C++ operator (kernels/cpu_operators.py); else
    gathers them (`gather_decode_attention`)."""
    if query.is_cuda and window is None:  # the Triton kernel has no window yet: the torch path below
        from kernels.triton_paged_attention import paged_decode_attention_triton, supports

        if supports(key_cache.shape[1], query.shape[2]):
            return paged_decode_attention_triton(query, key_cache, value_cache, block_tables, context_lens, scale)
    if query.device.type == "cpu" and cpu_operators.available():
        if isinstance(key_cache, QuantizedKv):
            return torch.ops.workbench.paged_decode_attention(
                query,
                key_cache.codes,
                value_cache.codes,
                block_tables,
                context_lens,
                scale,
                window or 0,
                key_cache.scales,
                value_cache.scales,
            )
        return torch.ops.workbench.paged_decode_attention(
            query, key_cache, value_cache, block_tables, context_lens, scale, window or 0
        )
    return gather_decode_attention(query, key_cache, value_cache, block_tables, context_lens, scale, buckets, window)


def gather_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    buckets: list | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """The torch path: gathers sequences of similar length together (`buckets`), so one long
    context does not make every short sequence in the batch gather (and attend over) that many
    padded slots. Without buckets it attends over every slot of the block tables with a mask: one
    fixed sequence of operators whatever the lengths, which is what a compiled decode graph needs
    (see engine.executor)."""
    if buckets is None:
        return _decode_bucket(query, key_cache, value_cache, block_tables, context_lens, scale, window)
    if len(buckets) == 1:
        _, num_blocks, same_length = buckets[0]
        return _decode_bucket(
            query, key_cache, value_cache, block_tables[:, :num_blocks], context_lens, scale, window, same_length
        )
    out = torch.empty_like(query)
    for rows, num_blocks, same_length in buckets:
        out[rows] = _decode_bucket(
            query[rows],
            key_cache,
            value_cache,
            block_tables[rows, :num_blocks],
            context_lens[rows],
            scale,
            window,
            same_length,
        )
    return out


def length_buckets(lengths: list[int], block_size: int, device: torch.device, max_padding: float = 2.0) -> list:
    """[(row indices, blocks to gather, the common length or None)] for groups whose longest
    context is at most `max_padding` times their shortest (contexts up to 64 blocks all share one
    group). A group whose sequences all have the same length needs no mask (one sequence, or a
    benchmark's equal prompts), which lets attention take its unmasked path."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    groups, current = [], [order[0]]
    for row in order[1:]:
        if lengths[row] > max_padding * max(lengths[current[0]], 64 * block_size):
            groups.append(current)
            current = []
        current.append(row)
    groups.append(current)

    def common_length(group: list[int]) -> int | None:
        return lengths[group[0]] if lengths[group[0]] == lengths[group[-1]] else None

    if len(groups) == 1:
        return [(slice(None), -(-lengths[order[-1]] // block_size), common_length(order))]
    return [
        (torch.tensor(group, device=device), -(-lengths[group[-1]] // block_size), common_length(group))
        for group in groups
    ]


def gather_blocks(cache: torch.Tensor | QuantizedKv, block_tables: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The cache slots the block tables list, in order, in `dtype`: [*block_tables.shape[:-1],
    blocks * block_size, kv_heads, head_dim]. `index_select` copies whole blocks; on the development
    CPU it ran 3.8x faster than advanced indexing (`cache[block_tables]`) for a batch of 64 x
    256-token contexts."""
    if isinstance(cache, QuantizedKv):
        codes = gather_blocks(cache.codes, block_tables, cache.codes.dtype)
        scales = cache.scales.index_select(0, block_tables.reshape(-1))
        return dequantize(codes, scales.view(*codes.shape[:-1]), dtype)
    gathered = cache.index_select(0, block_tables.reshape(-1))
    return gathered.view(*block_tables.shape[:-1], -1, *cache.shape[2:]).to(dtype)


def _as_cached(rows: torch.Tensor, cache: torch.Tensor | QuantizedKv, query: torch.Tensor) -> torch.Tensor:
    """Fresh rows as the cache holds them, in the attention's dtype (attention_dtype)."""
    if isinstance(cache, QuantizedKv):
        return dequantize(*quantize_rows(rows, cache.codes.dtype), query.dtype)
    return rows.to(cache.dtype)


def attention_dtype(cache: torch.Tensor | QuantizedKv, query: torch.Tensor) -> torch.dtype:
    """What attention computes in: the cache's dtype (a bf16 cache on a float32 engine:
    kv_cache_dtype), or for an 8-bit cache the query's."""
    return query.dtype if isinstance(cache, QuantizedKv) else cache.dtype


def window_block_tables(
    block_tables: torch.Tensor, context_lens: torch.Tensor, window: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The columns of each row's block table that hold its last `window` positions (at most
    window / block_size + 1 blocks), and the position each row's first such block starts at: a
    sliding-window layer gathers those instead of the whole context."""
    width = min(block_tables.shape[1], -(-window // block_size) + 1)
    first_block = ((context_lens - window).clamp(min=0) // block_size).clamp(max=block_tables.shape[1] - width)
    columns = first_block[:, None] + torch.arange(width, device=block_tables.device)
    return block_tables.gather(1, columns), first_block * block_size


def _decode_bucket(
    query, key_cache, value_cache, block_tables, context_lens, scale, window: int | None, same_length: int | None = None
):
    num_seqs, num_heads, head_dim = query.shape
    kv_heads = key_cache.shape[2]
    first_position = None
    if window is not None:
        block_tables, first_position = window_block_tables(block_tables, context_lens, window, key_cache.shape[1])
    dtype = attention_dtype(key_cache, query)
    keys = gather_blocks(key_cache, block_tables, dtype).transpose(1, 2)  # [num_seqs, kv_heads, max_len, head_dim]
    values = gather_blocks(value_cache, block_tables, dtype).transpose(1, 2)
    grouped_query = query.view(num_seqs, kv_heads, num_heads // kv_heads, head_dim).to(dtype)
    if same_length is not None and window is None:  # every sequence sees exactly its first same_length slots
        out = F.scaled_dot_product_attention(
            grouped_query, keys[:, :, :same_length], values[:, :, :same_length], scale=scale
        )
    else:
        positions = torch.arange(keys.shape[2], device=query.device)[None, :]
        if first_position is not None:
            positions = positions + first_position[:, None]
        visible = positions < context_lens[:, None]  # [num_seqs, max_len]
        if window is not None:
            visible &= positions >= context_lens[:, None] - window
        out = F.scaled_dot_product_attention(
            grouped_query, keys, values, attn_mask=visible[:, None, None, :], scale=scale
        )
    return out.reshape(num_seqs, num_heads, head_dim).to(query.dtype)


def paged_prefill_attention(
    query: torch.Tensor,  # [num_new, num_heads, head_dim]: the last num_new positions of the context
    key: torch.Tensor,  # [num_new, kv_heads, head_dim]: the same positions' keys (already in the cache)
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,  # [num_blocks_of_this_sequence]
    context_len: int,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    num_new = query.shape[0]
    # A sliding-window layer reads from the first block its first query can see.
    block_size = key_cache.shape[1]
    first_block = 0 if window is None else max(context_len - num_new - window + 1, 0) // block_size
    first_key = first_block * block_size
    if context_len == num_new:
        # Nothing cached before this chunk: attend to the fresh keys (as the cache holds them), no gather needed.
        keys, values = _as_cached(key, key_cache, query), _as_cached(value, value_cache, query)
        first_key = 0
    else:
        dtype = attention_dtype(key_cache, query)
        keys = gather_blocks(key_cache, block_table[first_block:], dtype)[: context_len - first_key]
        values = gather_blocks(value_cache, block_table[first_block:], dtype)[: context_len - first_key]
    query_positions = torch.arange(context_len - num_new, context_len, device=query.device)
    key_positions = torch.arange(first_key, context_len, device=query.device)[None, :]
    causal = key_positions <= query_positions[:, None]
    if window is not None:
        causal &= key_positions > query_positions[:, None] - window
    # Heads first, with a batch of one: 4-D inputs with enable_gqa take PyTorch's fused CPU kernel;
    # a 3-D grouped-query form runs the slower unfused math path (docs/measurements.md, "Measured reasons behind the
    # code").
    out = F.scaled_dot_product_attention(
        query.to(keys.dtype).transpose(0, 1)[None],
        keys.transpose(0, 1)[None],
        values.transpose(0, 1)[None],
        attn_mask=causal,
        scale=scale,
        enable_gqa=True,
    )
    return out[0].transpose(0, 1).to(query.dtype)
