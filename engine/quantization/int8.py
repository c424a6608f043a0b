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
    """Token embeddings read from the int8 LM head they are tied to: row i of the table is row i of
    the head's weight, so one int8 table (and its per-row scales) serves both, and the lookup
    dequantizes only the rows it gathers."""

    def __init__(self, head: Int8Linear, dtype: torch.dtype):
        super().__init__()
        self.head, self.dtype = head, dtype

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        rows = self.head.qweight.index_select(0, token_ids).to(self.dtype)
        return rows * self.head.scales.index_select(0, token_ids).to(self.dtype)[:, None]
