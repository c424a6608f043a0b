"""Quantized linear layers' matmuls, dispatched by device.

CUDA: the Triton kernels (dequantization inside the K loop). CPU: PyTorch's packed CPU kernels,
`_weight_int8pack_mm` and `_weight_int4pack_mm_for_cpu`, which take bfloat16 activations: with
bf16 they ran 2-10x faster than a dense fp32 matmul on the development machine for SmolLM2's
shapes at M=1, and 5-30x slower with fp32 activations, so activations are cast to bf16 for the
product and the result cast back to the compute dtype.

W4A8 (int4 weights, activations as int8 per block of 32) runs this project's VNNI operator on the
CPU (kernels/cpu_int4_product.cpp: llama.cpp's Q4_1 x Q8 arithmetic); on CUDA the int4 Triton
kernel multiplies the activations as quantized and dequantized, the same values.

W8A8 (int8 weights and per-token int8 activations) runs `torch._int_mm` on CPU (oneDNN, int32
accumulation, VNNI where the CPU has it): on the development CPU it ran at 470-670 GFLOP/s for
SmolLM2's projections at M = 64 and 2048, against 190-310 for the fp32 product. The weight is
passed as the transposed view of its [N, K] storage: a contiguous [K, N] copy ran 4x slower at
M = 64.
"""

from __future__ import annotations

import torch

from kernels.quant import (
    ACTIVATION_BLOCK,
    dequantize_int4,
    dequantize_int8,
    dequantize_per_block_int8,
    quantize_per_block_int8,
    quantize_per_token_int8,
    unpack_int4,
)


def int8_matmul_reference(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return (x.float() @ dequantize_int8(q, scales).T).to(x.dtype)


def int4_matmul_reference(x, packed, scales, minimums, group_size) -> torch.Tensor:
    return (x.float() @ dequantize_int4(packed, scales, minimums, group_size).T).to(x.dtype)


def w8a8_matmul_reference(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Both operands quantized, then dequantized and multiplied in float64."""
    flat = x.reshape(-1, x.shape[-1])
    q_x, x_scales = quantize_per_token_int8(flat)
    out = (q_x.double() * x_scales.double()) @ (q.double() * scales.double()[:, None]).T
    return out.to(x.dtype).reshape(*x.shape[:-1], q.shape[0])


def blockwise_int8_activations(x: torch.Tensor) -> torch.Tensor:
    """x [..., K] -> the values W4A8 multiplies: each block of 32 inputs quantized to int8 and back."""
    flat = x.reshape(-1, x.shape[-1])
    return dequantize_per_block_int8(*quantize_per_block_int8(flat)).to(x.dtype).reshape(x.shape)


def w4a8_matmul_reference(x, packed, scales, minimums, group_size) -> torch.Tensor:
    """Both operands quantized, then dequantized and multiplied in float64 (scales and minimums
    rounded to float16, as the operator stores them)."""
    weight = dequantize_int4(packed, scales.half().float(), minimums.half().float(), group_size).double()
    return (blockwise_int8_activations(x.float()).double() @ weight.T).to(x.dtype)


def prepare_w4a8_cpu(
    packed: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor, group_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Our int4 format -> the operator's: for each 64 inputs 32 bytes, byte b holding input b in
    its low nibble and input 32 + b in its high one (so one AND and one shift give two blocks in
    input order); a float16 scale and minimum per block of 32 inputs (a group of 64 or 128 repeats
    its own)."""
    codes = unpack_int4(packed)
    rows, columns = codes.shape
    halves = codes.view(rows, columns // 64, 2, 32)
    operator_codes = (halves[:, :, 0] | (halves[:, :, 1] << 4)).reshape(rows, columns // 2).contiguous()
    repeats = group_size // ACTIVATION_BLOCK
    return (
        operator_codes,
        scales.repeat_interleave(repeats, dim=1).half().contiguous(),
        minimums.repeat_interleave(repeats, dim=1).half().contiguous(),
    )


def w4a8_matmul_cpu(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor) -> torch.Tensor:
    """x [..., K]; the operator's codes [N, K/2], float16 scales and minimums [N, K/32] -> [..., N]."""
    flat = x.reshape(-1, x.shape[-1]).float()
    out = torch.ops.workbench.int4_product(flat, codes, scales, minimums)
    return out.to(x.dtype).reshape(*x.shape[:-1], codes.shape[0])


def w8a8_matmul_cpu(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x [..., K] float; q int8 [N, K]; scales float32 [N] -> [..., N] in x's dtype."""
    flat = x.reshape(-1, x.shape[-1])
    q_x, x_scales = quantize_per_token_int8(flat)
    # Convert first, then scale in place: faster than a type-promoting multiply, same values (the
    # promotion converts to float32 too). docs/measurements.md, "Measured reasons behind the code".
    out = torch._int_mm(q_x, q.t()).float().mul_(x_scales).mul_(scales)
    return out.to(x.dtype).reshape(*x.shape[:-1], q.shape[0])


def int8_matmul_cpu(x: torch.Tensor, q: torch.Tensor, scales_bf16: torch.Tensor) -> torch.Tensor:
    """x [..., K]; q int8 [N, K]; scales bfloat16 [N].

    One row inside a compiled graph: written as a reduction (int8 converted, multiplied and summed
    over K, then scaled), which inductor turns into one loop that streams the int8 weights once, in
    float32. For one row that beats `_weight_int8pack_mm` (bf16 activations) on Gemma 3's
    262,144 x 640 head, and loses from 4 rows on (docs/measurements.md, "Figures behind the code"),
    so only single-row graphs take it. Eagerly the same expression would build the whole float32
    weight, so eager steps always take the packed kernel."""
    if torch.compiler.is_compiling() and x.numel() == x.shape[-1]:
        row = x.reshape(1, x.shape[-1]).float()
        out = (q.to(torch.float32) * row).sum(-1) * scales_bf16.float()
        return out.to(x.dtype).reshape(*x.shape[:-1], q.shape[0])
    flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
    return torch.ops.aten._weight_int8pack_mm(flat, q, scales_bf16).to(x.dtype).reshape(*x.shape[:-1], q.shape[0])


def prepare_int4_cpu(
    packed: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Our int4 format -> the CPU kernel's: its own weight packing, and bf16 (scale, zero) pairs
    [K/g, N, 2] in its convention w = (q - 8) * scale + zero, i.e. zero = minimum + 8 * scale."""
    from kernels.quant import unpack_int4

    cpu_packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(unpack_int4(packed).to(torch.int32), 1)
    scales_and_zeros = torch.stack([scales, minimums + 8.0 * scales], dim=-1).transpose(0, 1).contiguous()
    return cpu_packed, scales_and_zeros.to(torch.bfloat16)


def int4_matmul_cpu(
    x: torch.Tensor, cpu_packed: torch.Tensor, scales_and_zeros: torch.Tensor, group_size: int, out_features: int
) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
    out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, cpu_packed, group_size, scales_and_zeros)
    return out.to(x.dtype).reshape(*x.shape[:-1], out_features)
