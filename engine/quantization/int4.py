"""int4 weight-only (W4A16): 4-bit weights with a scale and a minimum per group of `group_size`
inputs, two per byte."""

from __future__ import annotations

import torch
from torch import nn

from engine.quantization.base import QuantizationMethod, QuantizedLinear
from kernels.quant import quantize_int4
from kernels.quant_matmul import int4_matmul_cpu, prepare_int4_cpu


class Int4Linear(QuantizedLinear):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int):
        super().__init__(weight, bias)
        self.group_size = group_size
        self.format = f"int4 g{group_size} (packed, scales and minimums)"
        packed, scales, minimums = quantize_int4(weight, group_size)
        if self.on_cuda:
            self.register_buffer("qweight", packed)
            self.register_buffer("scales", scales)
            self.register_buffer("minimums", minimums)
        else:  # the layout torch's CPU int4 kernel reads
            cpu_packed, scales_and_zeros = prepare_int4_cpu(packed, scales, minimums)
            self.register_buffer("qweight", cpu_packed)
            self.register_buffer("scales_and_zeros", scales_and_zeros)

    def matmul_cuda(self, x: torch.Tensor) -> torch.Tensor:
        from kernels.triton_quant_matmul import int4_matmul_triton

        return int4_matmul_triton(x, self.qweight, self.scales, self.minimums, self.group_size)

    def matmul_cpu(self, x: torch.Tensor) -> torch.Tensor:
        return int4_matmul_cpu(x, self.qweight, self.scales_and_zeros, self.group_size, self.out_features)


class Int4WeightOnly(QuantizationMethod):
    name = "int4"
    description = "W4A16: 4-bit, a scale and a minimum per group of group_size inputs, two per byte"
    batched_copy_helps = True
    bits_per_weight = 4
    group_sizes = (32, 64, 128)

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        return Int4Linear(weight, bias, group_size)
