"""Weight-only quantization formats and their torch reference (de)quantizers.

int8 (W8A16): symmetric, one float scale per output channel; w ~= q * scale, q in [-127, 127].
int4 (W4A16): asymmetric per group of `group_size` input columns: w ~= q * scale + minimum with
q in [0, 15] and a float scale and minimum per group (llama.cpp's Q4_1 layout, so a Q4_1 file
quantized with group 32 comes back exactly); two 4-bit values per byte, the even column in the
low nibble.
W4A8 (int4 weights as above, with the scale and minimum in float16) takes activations as int8 per
block of 32 inputs, symmetric, as llama.cpp's Q8 blocks do (the product: kernels/quant_matmul.py).
W8A8 activations: symmetric int8 per token (per row), computed on the fly for each product; with
int8 weights per output channel the product accumulates exactly in int32 and both scales apply
once at the end (vLLM's dynamic per-token W8A8 int8 scheme; the engine smooths the model's
activation outliers into its weights first, engine/execution/smoothing.py).
"""

from __future__ import annotations

import torch


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [N, K] -> (q int8 [N, K], scales float32 [N])."""
    scales = weight.float().abs().amax(dim=1).clamp(min=1e-8) / 127.0
    q = torch.round(weight.float() / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


def quantize_per_token_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (q int8 [M, K], scales float32 [M, 1]); q = round(x * 127 / max|row|).
    Each row depends on itself only, so a token's result does not change with its batch mates.
    Multiplying by the reciprocal (not dividing) and rounding in place ran 3x faster in eager
    mode on the development CPU; |x * 127 / max| <= 127 needs no clamp."""
    absmax = x.abs().amax(dim=-1, keepdim=True).float().clamp_(min=1e-8)
    q = x.float().mul(absmax.reciprocal().mul_(127.0)).round_().to(torch.int8)
    return q, absmax.div_(127.0)


ACTIVATION_BLOCK = 32  # W4A8: inputs per activation scale


def quantize_per_block_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (K a multiple of 32) -> (codes int8 [M, K], scales float32 [M, K/32]); each block
    of 32 inputs rounded to 127 / its largest magnitude (a zero block keeps scale 0, codes 0)."""
    rows, columns = x.shape
    blocks = x.float().view(rows, columns // ACTIVATION_BLOCK, ACTIVATION_BLOCK)
    largest = blocks.abs().amax(dim=-1)
    # 127 divided by the largest, rounded once, as the operator computes it: `127.0 / tensor` is
    # reciprocal-then-multiply in torch, rounded twice, and moved a code at x * inverse = 63.5.
    inverse = torch.where(largest > 0, torch.full_like(largest, 127.0).div(largest), torch.zeros_like(largest))
    codes = torch.round(blocks * inverse[..., None]).to(torch.int8).view(rows, columns)
    return codes, largest / 127.0


def dequantize_per_block_int8(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    rows, columns = codes.shape
    blocks = codes.float().view(rows, columns // ACTIVATION_BLOCK, ACTIVATION_BLOCK)
    return (blocks * scales[..., None]).view(rows, columns)


def dequantize_int8(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return q.float() * scales[:, None]


def quantize_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """weight [N, K] -> (packed uint8 [N, K/2], scales float32 [N, K/g], minimums float32 [N, K/g])."""
    rows, columns = weight.shape
    if columns % group_size or group_size % 2:
        raise ValueError(f"group_size {group_size} must be even and divide the input width {columns}")
    groups = weight.float().view(rows, columns // group_size, group_size)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scales = ((high - low) / 15.0).clamp(min=1e-8)
    q = torch.round((groups - low[..., None]) / scales[..., None]).clamp(0, 15).to(torch.uint8).view(rows, columns)
    return pack_int4(q), scales, low


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """[N, K] values in [0, 15] -> [N, K/2] bytes: column 2i in the low nibble, 2i+1 in the high."""
    return (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """[N, K/2] bytes -> [N, K] values in [0, 15] (uint8)."""
    low, high = packed & 0x0F, packed >> 4
    return torch.stack([low, high], dim=-1).view(packed.shape[0], packed.shape[1] * 2)


def dequantize_int4(
    packed: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor, group_size: int
) -> torch.Tensor:
    q = unpack_int4(packed).float()
    rows, columns = q.shape
    groups = q.view(rows, columns // group_size, group_size)
    return (groups * scales[..., None] + minimums[..., None]).view(rows, columns)
