"""int8 weight-only (W8A16): int8 weights, symmetric per output channel; the activations stay in
the compute dtype."""

from __future__ import annotations

import torch
from torch import nn

from engine.quantization.base import QuantizationMethod
from kernels.quant import quantize_int8
from kernels.quant_matmul import int8_matmul_cpu


class Int8Linear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.on_cuda = weight.is_cuda
        q, scales = quantize_int8(weight)
        self.register_buffer("qweight", q)
        # The CPU kernel (torch's _weight_int8pack_mm) takes bf16 scales.
        self.register_buffer("scales", scales if self.on_cuda else scales.to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.on_cuda:
            from kernels.triton_quant_matmul import int8_matmul_triton

            out = int8_matmul_triton(x, self.qweight, self.scales)
        else:
            out = int8_matmul_cpu(x, self.qweight, self.scales)
        return out if self.bias is None else out + self.bias


class Int8WeightOnly(QuantizationMethod):
    name = "int8"
    description = "W8A16: int8, symmetric per output channel"
    bits_per_weight = 8

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        return Int8Linear(weight, bias)
