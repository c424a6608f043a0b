"""Triton quantized matmuls: W8A16 / W4A16, y = x @ dequant(W).T with dequantization inside the
K loop, and W8A8, y = (q_x @ q_w.T) * x_scale * w_scale with int8 operands and int32 accumulation.

Two tilings: a decode variant for small M (a 16-row tile and split-K, so a handful of tokens still
spreads over many programs) and a prefill variant (64-row tiles, no split). Weight-only products
accumulate in float32. The formats are those of kernels/quant.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.quant import quantize_per_token_int8


@triton.jit
def _quant_matmul_kernel(
    x_ptr,
    w_ptr,
    scale_ptr,
    zero_ptr,
    act_scale_ptr,
    out_ptr,
    M,
    N,
    K,
    group_size,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_sn,
    stride_sg,
    stride_om,
    stride_on,
    BITS: tl.constexpr,
    INT8_ACTIVATIONS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    pid_m, pid_n, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask, n_mask = offs_m < M, offs_n < N
    if INT8_ACTIVATIONS:  # int8 x int8 products summed exactly; the scales come after the loop
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_span = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_begin = pid_k * k_span
    for k0 in range(k_begin, k_begin + k_span, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
            mask=m_mask[:, None] & k_mask[None, :],
            other=0,
        )
        w_mask = k_mask[:, None] & n_mask[None, :]
        if INT8_ACTIVATIONS:
            w = tl.load(w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None] * stride_wk, mask=w_mask, other=0)
        elif BITS == 8:
            x = x.to(tl.float32)
            w = tl.load(w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None] * stride_wk, mask=w_mask, other=0).to(
                tl.float32
            )
        else:
            x = x.to(tl.float32)
            packed = tl.load(
                w_ptr + offs_n[None, :] * stride_wn + (offs_k[:, None] // 2) * stride_wk, mask=w_mask, other=0
            )
            q = ((packed >> ((offs_k[:, None] % 2) * 4)) & 0xF).to(tl.float32)
            group = offs_k[:, None] // group_size
            scale = tl.load(scale_ptr + offs_n[None, :] * stride_sn + group * stride_sg, mask=w_mask, other=0.0)
            zero = tl.load(zero_ptr + offs_n[None, :] * stride_sn + group * stride_sg, mask=w_mask, other=0.0)
            w = q * scale + zero  # zero holds the group's minimum
        acc = tl.dot(x, w, acc)
    result = acc.to(tl.float32)
    if INT8_ACTIVATIONS:  # per-token scale
        result = result * tl.load(act_scale_ptr + offs_m, mask=m_mask, other=0.0)[:, None]
    if BITS == 8:  # per-channel scale: applied once, after the K loop
        result = result * tl.load(scale_ptr + offs_n * stride_sn, mask=n_mask, other=0.0)[None, :]
    out = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    out_mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT_K == 1:
        tl.store(out, result, mask=out_mask)
    else:  # the scales are linear, so scaled partial sums add up
        tl.atomic_add(out, result, mask=out_mask)


def _launch(x, weight, scales, zeros, group_size, bits, int8_activations=False):
    x2 = x.reshape(-1, x.shape[-1])
    act_scales = None
    if int8_activations:
        x2, act_scales = quantize_per_token_int8(x2)
    rows, depth = x2.shape
    width = weight.shape[0]
    decode = rows <= 16
    block_m, block_n, block_k = (16, 64, 64) if decode else (64, 64, 32)
    split_k = max(1, min(8, depth // 512)) if decode else 1
    out = torch.zeros((rows, width), device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(width, block_n), split_k)
    scale_stride_group = scales.stride(1) if scales.dim() == 2 else 0
    _quant_matmul_kernel[grid](
        x2,
        weight,
        scales,
        zeros if zeros is not None else scales,
        act_scales if act_scales is not None else scales,
        out,
        rows,
        width,
        depth,
        group_size,
        x2.stride(0),
        x2.stride(1),
        weight.stride(0),
        weight.stride(1),
        scales.stride(0),
        scale_stride_group,
        out.stride(0),
        out.stride(1),
        BITS=bits,
        INT8_ACTIVATIONS=int8_activations,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        SPLIT_K=split_k,
    )
    return out.to(x.dtype).reshape(*x.shape[:-1], width)


def int8_matmul_triton(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x [..., K] (any float dtype), q int8 [N, K], scales float32 [N] -> [..., N] in x's dtype."""
    return _launch(x, q, scales, None, 1, bits=8)


def int4_matmul_triton(
    x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor, group_size: int
) -> torch.Tensor:
    """x [..., K], packed uint8 [N, K/2], scales / minimums float32 [N, K/g] -> [..., N]."""
    return _launch(x, packed, scales, minimums, group_size, bits=4)


def w8a8_matmul_triton(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x [..., K] float, quantized per token here; q int8 [N, K], scales float32 [N] -> [..., N]."""
    return _launch(x, q, scales, None, 1, bits=8, int8_activations=True)
