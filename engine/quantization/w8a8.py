"""W8A8: int8 weights per output channel and int8 activations per token, quantized on the fly, so
that the product itself runs on integers. That pays when a step is compute-bound (batched decode,
prefill) rather than bound by reading the weights. The model is smoothed first (SmoothQuant,
engine/execution/smoothing.py), calibrated at load."""

from __future__ import annotations

import torch
from torch import nn

from engine.quantization.base import QuantizationMethod, QuantizedLinear
from kernels.quant import quantize_int8
from kernels.quant_matmul import w8a8_matmul_cpu


class W8A8Linear(QuantizedLinear):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__(weight, bias)
        self.format = "w8a8 (int8 weights and scales)"
        # _int_mm and the Triton kernel both take the [N, K] int8 weight as stored.
        q, scales = quantize_int8(weight)
        self.register_buffer("qweight", q)
        self.register_buffer("scales", scales)

    def matmul_cuda(self, x: torch.Tensor) -> torch.Tensor:
        from kernels.triton_quant_matmul import w8a8_matmul_triton

        return w8a8_matmul_triton(x, self.qweight, self.scales)

    def matmul_cpu(self, x: torch.Tensor) -> torch.Tensor:
        return w8a8_matmul_cpu(x, self.qweight, self.scales)


class W8A8(QuantizationMethod):
    name = "w8a8"
    description = "int8 weights and int8 activations per token: an integer product (smoothed at load)"
    bits_per_weight = 8
    needs_activation_smoothing = True
    # The head keeps the integer product too: at batched sizes the weight-only int8 kernel is
    # slower than the float head and the integer product faster (docs/measurements.md, "Measured reasons behind the
    # code").
    lm_head_method = "w8a8"

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        return W8A8Linear(weight, bias)
