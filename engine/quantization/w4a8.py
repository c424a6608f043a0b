"""W4A8: int4 weights (a scale and a minimum per group, as int4) times activations quantized to int8
per block of 32 inputs, so that the product runs on integers: llama.cpp's Q4_1 x Q8 arithmetic.
On the CPU with AVX-512 VNNI one row multiplies in 0.41-0.51x the time of torch's int4 kernel
with bf16 activations, 4 rows in 0.70-1.06x (docs/measurements.md, "int4 times int8
activations"); the activations' rounding costs some quality (docs/quantization.md: top-1 97.8%
against int4's 99.2%). Steps of BATCHED_ROWS rows or more take the batched bf16 copy as int4
does."""

from __future__ import annotations

import torch
from torch import nn

from engine.errors import ConfigError
from engine.quantization.base import QuantizationMethod, QuantizedLinear
from kernels import cpu_operators
from kernels.quant import quantize_int4
from kernels.quant_matmul import blockwise_int8_activations, prepare_w4a8_cpu, w4a8_matmul_cpu

# The operator reads 64 inputs at a time.
INPUT_MULTIPLE = 64


class W4A8Linear(QuantizedLinear):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int):
        super().__init__(weight, bias)
        self.group_size = group_size
        self.format = f"w4a8 g{group_size} (packed, float16 scales and minimums per 32)"
        packed, scales, minimums = quantize_int4(weight, group_size)
        if self.on_cuda:  # the int4 Triton kernel's layout; activations are rounded before it
            self.register_buffer("qweight", packed)
            self.register_buffer("scales", scales.half().float())
            self.register_buffer("minimums", minimums.half().float())
        else:
            codes, block_scales, block_minimums = prepare_w4a8_cpu(packed, scales, minimums, group_size)
            self.register_buffer("qweight", codes)
            self.register_buffer("scales", block_scales)
            self.register_buffer("minimums", block_minimums)

    def matmul_cuda(self, x: torch.Tensor) -> torch.Tensor:
        from kernels.triton_quant_matmul import int4_matmul_triton

        rounded = blockwise_int8_activations(x)
        return int4_matmul_triton(rounded, self.qweight, self.scales, self.minimums, self.group_size)

    def matmul_cpu(self, x: torch.Tensor) -> torch.Tensor:
        return w4a8_matmul_cpu(x, self.qweight, self.scales, self.minimums)


class W4A8(QuantizationMethod):
    name = "w4a8"
    description = "int4 weights x int8 activations per 32 inputs: an integer product (llama.cpp's Q4_1 x Q8)"
    batched_copy_helps = True
    bits_per_weight = 4
    group_sizes = (32, 64, 128)

    def unavailable_reason(self) -> str | None:
        if not cpu_operators.available():
            return f"its CPU operator could not be built: {cpu_operators.unavailable_reason()}"
        return None

    def check(self, config, group_size, quantize_lm_head, batched_copy=False, on_cuda=False) -> None:
        super().check(config, group_size, quantize_lm_head, batched_copy, on_cuda)
        widths = {"hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size}
        widths["num_heads x head_dim"] = config.num_heads * config.head_dim
        for name, width in widths.items():
            if width % INPUT_MULTIPLE:
                raise ConfigError(
                    f"quantization: w4a8 needs input widths that are multiples of {INPUT_MULTIPLE}; "
                    f"{name} is {width} (choose int4)"
                )

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        return W4A8Linear(weight, bias, group_size)
