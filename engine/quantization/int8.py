"""int8 weight-only (W8A16): int8 weights, symmetric per output channel; the activations stay in
the compute dtype."""

from __future__ import annotations

import torch
from torch import nn

from engine.quantization.base import QuantizationMethod, QuantizedLinear
from kernels.quant import quantize_int8
from kernels.quant_matmul import int8_matmul_cpu


class Int8Linear(QuantizedLinear):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__(weight, bias)
        self.format = "int8 (weights and scales)"
        q, scales = quantize_int8(weight)
        self.register_buffer("qweight", q)
        # The CPU kernel (torch's _weight_int8pack_mm) takes bf16 scales.
        self.register_buffer("scales", scales if self.on_cuda else scales.to(torch.bfloat16))

    def matmul_cuda(self, x: torch.Tensor) -> torch.Tensor:
        from kernels.triton_quant_matmul import int8_matmul_triton

        return int8_matmul_triton(x, self.qweight, self.scales)

    def matmul_cpu(self, x: torch.Tensor) -> torch.Tensor:
        return int8_matmul_cpu(x, self.qweight, self.scales)


class Int8WeightOnly(QuantizationMethod):
    name = "int8"
    description = "W8A16: int8, symmetric per output channel"
    batched_copy_helps = True
    bits_per_weight = 8

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        return Int8Linear(weight, bias)


class Int8Embedding(nn.Module):
    """Token embeddings as int8 with a scale per group of 32 values of each row (per row when the
    width is not a multiple of 32), dequantized only for the rows a step gathers.

    Its own table rather than the int8 head's rows: a GGUF file stores a tied table as Q8_0 (int8
    values, a scale per 32), which these groups hold exactly, while the head's one scale per row
    (what the CPU's int8 product takes) rounded Gemma 3's embeddings enough to cost +0.55% of
    perplexity (docs/models.md). Gemma 3's 262,144 x 640 table: 168 MB of int8 and 21 MB of scales
    instead of 671 MB of float32."""

    GROUP_SIZE = 32

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        rows, width = weight.shape
        group = self.GROUP_SIZE if width % self.GROUP_SIZE == 0 else width
        q, scales = quantize_int8(weight.reshape(-1, group))
        self.register_buffer("qweight", q.reshape(rows, width))
        self.register_buffer("scales", scales.reshape(rows, width // group))
        self.group, self.dtype = group, dtype
        self.format = f"int8 embedding (values and a scale per {group})"

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        rows = self.qweight.index_select(0, token_ids).to(self.dtype)
        scales = self.scales.index_select(0, token_ids).to(self.dtype)
        return (rows.view(len(token_ids), -1, self.group) * scales[:, :, None]).view(rows.shape)
