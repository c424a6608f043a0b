"""Triton paged-attention decode: one program per (sequence, kv head) walks the sequence's block
table, reads K/V block by block and keeps an online softmax for the query heads of that kv head
(GQA without repeating K/V). Sequences of any mix of lengths share one launch.

An 8-bit cache (int8 or fp8 e4m3 codes, kernels/quantized_kv.py) passes a QuantizedKv for each of
the key and value caches: the kernel reads the codes as float32 and applies each row's scale once,
to its score (keys) and to its softmax weight after the weights' sum (values), as the CPU operator
does. Dequantized in the kernel: no float copy of the cache is made."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.quantized_kv import QuantizedKv


@triton.jit
def _paged_decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    k_scales_ptr,
    v_scales_ptr,
    block_tables_ptr,
    context_lens_ptr,
    out_ptr,
    scale,
    stride_qs,
    stride_qh,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_sb,
    stride_st,
    stride_sh,
    stride_bt_s,
    stride_os,
    stride_oh,
    SCALED: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_P: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    seq, kv_head = tl.program_id(0), tl.program_id(1)
    heads = kv_head * GROUP + tl.arange(0, GROUP_P)
    head_mask = tl.arange(0, GROUP_P) < GROUP
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(
        q_ptr + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :], mask=head_mask[:, None], other=0.0
    ).to(tl.float32)
    context_len = tl.load(context_lens_ptr + seq)
    running_max = tl.full((GROUP_P,), float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros((GROUP_P,), dtype=tl.float32)
    acc = tl.zeros((GROUP_P, HEAD_DIM), dtype=tl.float32)
    slots = tl.arange(0, BLOCK_SIZE)
    for block_index in range(0, tl.cdiv(context_len, BLOCK_SIZE)):
        block = tl.load(block_tables_ptr + seq * stride_bt_s + block_index)
        offsets = block * stride_kb + slots[:, None] * stride_kt + kv_head * stride_kh + dims[None, :]
        visible = block_index * BLOCK_SIZE + slots < context_len
        k = tl.load(k_cache_ptr + offsets, mask=visible[:, None], other=0.0).to(tl.float32)  # [BLOCK_SIZE, HEAD_DIM]
        v = tl.load(v_cache_ptr + offsets, mask=visible[:, None], other=0.0).to(tl.float32)
        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale  # [GROUP_P, BLOCK_SIZE]
        if SCALED:  # one scale per cached row: [BLOCK_SIZE]
            rows = block * stride_sb + slots * stride_st + kv_head * stride_sh
            scores = scores * tl.load(k_scales_ptr + rows, mask=visible, other=0.0).to(tl.float32)[None, :]
        scores = tl.where(visible[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        correction = tl.exp(running_max - new_max)
        weights = tl.exp(scores - new_max[:, None])
        running_sum = running_sum * correction + tl.sum(weights, axis=1)
        if SCALED:  # the values' scales join the weights after their sum, which they are not part of
            weights = weights * tl.load(v_scales_ptr + rows, mask=visible, other=0.0).to(tl.float32)[None, :]
        acc = acc * correction[:, None] + tl.sum(weights[:, :, None] * v[None, :, :], axis=1)
        running_max = new_max
    out = acc / running_sum[:, None]
    tl.store(out_ptr + seq * stride_os + heads[:, None] * stride_oh + dims[None, :], out, mask=head_mask[:, None])


def supports(block_size: int, head_dim: int) -> bool:
    """The kernel tiles a whole block and a whole head: both must be powers of two."""
    return triton.next_power_of_2(block_size) == block_size and triton.next_power_of_2(head_dim) == head_dim


def paged_decode_attention_triton(query, key_cache, value_cache, block_tables, context_lens, scale) -> torch.Tensor:
    """Same contract as kernels.paged_attention.paged_decode_attention (QuantizedKv caches included)."""
    num_seqs, num_heads, head_dim = query.shape
    _, block_size, kv_heads, _ = key_cache.shape
    group = num_heads // kv_heads
    out = torch.empty(query.shape, dtype=torch.float32, device=query.device)
    block_tables = block_tables.to(torch.int32).contiguous()
    scaled = isinstance(key_cache, QuantizedKv)
    if scaled:
        (key_cache, key_scales), (value_cache, value_scales) = key_cache, value_cache
    else:  # no scales: the kernel never reads these
        key_scales = value_scales = key_cache
    _paged_decode_kernel[(num_seqs, kv_heads)](
        query,
        key_cache,
        value_cache,
        key_scales,
        value_scales,
        block_tables,
        context_lens.to(torch.int32),
        out,
        scale,
        query.stride(0),
        query.stride(1),
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        *(key_scales.stride() if scaled else (0, 0, 0)),  # the value scales' are the same
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        SCALED=scaled,
        GROUP=group,
        GROUP_P=triton.next_power_of_2(group),
        BLOCK_SIZE=block_size,
        HEAD_DIM=head_dim,
    )
    return out.to(query.dtype)
