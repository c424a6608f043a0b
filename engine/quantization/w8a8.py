"""W8A8: int8 weights per output channel and int8 activations per token, quantized on the fly, so
that the product itself runs on integers. That pays when a step is compute-bound (batched decode,
prefill) rather than bound by reading the weights. The model is smoothed first (SmoothQuant,
engine/smoothing.py), calibrated at load."""

from __future__ import annotations

import torch
from torch import nn

from engine.quantization.base import QuantizationMethod
from kernels.quant import quantize_int8
from kernels.quant_matmul import w8a8_matmul_cpu


class W8A8Linear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.on_cuda = weight.is_cuda
        # _int_mm and the Triton kernel both take the [N, K] int8 weight as stored.
        q, scales = quantize_int8(weight)
        self.register_buffer("qweight", q)
        self.register_buffer("scales", scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.on_cuda:
            from kernels.triton_quant_matmul import w8a8_matmul_triton

            out = w8a8_matmul_triton(x, self.qweight, self.scales)
        else:
            out = w8a8_matmul_cpu(x, self.qweight, self.scales)
        return out if self.bias is None else out + self.bias


class W8A8(QuantizationMethod):
    name = "w8a8"
    description = "int8 weights and int8 activations per token: an integer product (smoothed at load)"
    bits_per_weight = 8
    needs_activation_smoothing = True
    # The head keeps the integer product too: at batched sizes the weight-only int8 kernel is
    # slower than the float head and the integer product faster (README, "Measured reasons behind the code").
    lm_head_method = "w8a8"

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        return W8A8Linear(weight, bias)
