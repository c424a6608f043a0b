"""A KV cache of 8-bit codes: integers (kv_cache_dtype = "int8") or floats (fp8_e4m3), vLLM's names.

Each key row and each value row (one token, one KV head: head_dim numbers) is rounded to 8 bits
with a scale of its own, symmetric: scale = max |x| / largest code, code = x / scale rounded to
the nearest code, so the row's largest number is exact. int8's codes are evenly spaced (every
number within scale / 2: the row's largest / 254); fp8 e4m3's are 4 exponent and 3 mantissa bits
(largest 448), so each number keeps about 1/16 of itself whatever its size: small numbers beside
a large one keep digits that int8 rounds away, large ones lose digits int8 keeps. CPUs have no fp8
arithmetic: its codes are stored as torch.float8_e4m3fn and turned into float32 where attention
reads them (by torch, or by moving the code's bits: kernels/cpu_paged_attention.cpp).

The scale is kept in float16 beside the codes: head_dim + 2 bytes a row against 2 x head_dim in
bfloat16 (1.94x the tokens at head_dim 64, 1.98x at 256). A row is scaled on its own, not a block
or a head over many tokens, because rows arrive one token at a time and a block's earlier rows
are never rewritten.

An int8 cache's keys are rotated before they are rounded, and queries by the same rotation
before attention (`key_rotation`): a rotation keeps every query-key dot product, and spreads the
few channels that dominate a key (Gemma 3's) over all of them, so that a row's step is no longer
set by its outliers. On Gemma 3 270M against a bfloat16 cache (2,040 tokens): KL 0.027 -> 0.0026
nats/token, top-1 agreement 93.7% -> 97.8% (docs/quantization.md). Values need none (KL 0.0008
unrotated; rotated, worse). Where a model norms its keys with a gain per channel (Gemma 3's
k_norm), the key's channels are first divided by the square root of their gain and the query's
multiplied by it (`key_transforms`): the scores are unchanged again, and the channels the gain
makes large no longer set every other's step (Gemma 3, rotated: KL 0.0050 -> 0.0035 nats/token,
top-1 97.29% -> 97.81% on 8,165 tokens the square root was not chosen on).

An fp8 cache's keys are not rotated: its error is a share of each number, so unrotated a small
channel keeps its own digits, and rotated every channel carries a share of the outliers and their
error (Gemma 3, 4,081 tokens: KL 0.022 unrotated, 0.043 rotated; SmolLM2 0.0042 and 0.0037).

Attention reads the codes and multiplies each position's score (keys) or weight (values) by its
scale: the dot products run on the codes, the scales once per position (kernels/cpu_paged_attention.cpp).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

# The code dtype of each 8-bit cache, by kv_cache_dtype name.
CODE_DTYPES = {"int8": torch.int8, "fp8_e4m3": torch.float8_e4m3fn}
SCALE_DTYPE = torch.float16
_LARGEST_CODE = {torch.int8: 127.0, torch.float8_e4m3fn: 448.0}
_SMALLEST_SCALE = 2.0**-24  # float16's smallest positive number: an all-zero row keeps a finite scale


def is_code_dtype(dtype: torch.dtype) -> bool:
    """Whether a KV cache of this dtype holds 8-bit codes with scales (rather than the numbers)."""
    return dtype in _LARGEST_CODE


class QuantizedKv(NamedTuple):
    """One cache tensor (the keys, or the values) of an 8-bit cache."""

    codes: torch.Tensor  # [num_blocks, block_size, kv_heads, head_dim] int8 or float8_e4m3fn
    scales: torch.Tensor  # [num_blocks, block_size, kv_heads] float16

    @classmethod
    def zeros(cls, shape: tuple[int, ...], code_dtype: torch.dtype, device: torch.device) -> QuantizedKv:
        return cls(
            torch.zeros(shape, dtype=code_dtype, device=device),
            torch.zeros(shape[:-1], dtype=SCALE_DTYPE, device=device),
        )

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scales.nbytes


def bytes_per_row(head_dim: int) -> int:
    """Bytes of one token's key (or value) row of one KV head: the codes and their scale."""
    return head_dim + SCALE_DTYPE.itemsize


def quantize_rows(rows: torch.Tensor, code_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, scales) of rows [..., head_dim]: codes [..., head_dim] in `code_dtype`, scales
    float16 [...]. The codes are rounded against the float16 scale as stored, so that codes x scale
    is what attention reads back."""
    largest = _LARGEST_CODE[code_dtype]
    amax = rows.float().abs().amax(dim=-1)
    scales = (amax / largest).clamp_min(_SMALLEST_SCALE).to(SCALE_DTYPE)
    scaled = (rows.float() / scales.float().unsqueeze(-1)).clamp_(-largest, largest)
    if code_dtype == torch.int8:
        scaled = torch.round(scaled)  # float8's cast rounds to its nearest code itself
    return scaled.to(code_dtype), scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """codes x scales, [..., head_dim], in `dtype`."""
    return (codes.float() * scales.float().unsqueeze(-1)).to(dtype)


def rotates_keys(code_dtype: torch.dtype) -> bool:
    """Whether a cache of these codes holds its keys rotated (int8: see above)."""
    return code_dtype == torch.int8


def key_rotation(head_dim: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A fixed random orthogonal matrix [head_dim, head_dim] (seeded: the same for every engine
    of a model), applied as `rows @ rotation` to keys before they are cached and to queries."""
    gaussian = torch.randn(head_dim, head_dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return torch.linalg.qr(gaussian)[0].to(dtype=dtype, device=device)


def key_transforms(rotation: torch.Tensor, key_gains: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the keys', the queries') matrices, applied as `rows @ matrix` after RoPE: `rotation`, after
    key channels are divided by the square root of their norm's gain `key_gains` [head_dim] and
    query channels multiplied by it, so that query @ key is kept. RoPE mixes channel i with i +
    head_dim / 2, so a pair shares the larger gain's root. The square root, not the gain itself:
    on Gemma 3 (4,081 tokens) gain^0.25, ^0.5, ^0.75, ^1 gave KL 0.0028, 0.0023, 0.0047, 0.0032
    against 0.0036 without. Without gains (a model that does not norm its keys), the rotation."""
    if key_gains is None:
        return rotation, rotation
    half = key_gains.shape[0] // 2
    pair_gains = torch.maximum(key_gains[:half].abs(), key_gains[half:].abs()).repeat(2)
    # A channel its norm silences carries nothing: the floor only keeps the division finite.
    balance = pair_gains.float().clamp_min(1e-2).sqrt().to(rotation)[:, None]
    return rotation / balance, rotation * balance
