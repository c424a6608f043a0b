"""`QuantizationMethod`: what one quantization format knows about itself (vLLM's shape).

A method creates its layer's weights at load (`create_linear` replaces a float `nn.Linear` with a
module holding the low-bit tensors) and the module applies them in `forward` with the method's
kernels. It also knows its bits per weight (the memory model and the simulator read them), the
group sizes it accepts, and whether it can run here. Adding a format is one subclass in its own
module, registered in engine/quantization/__init__.py, plus its kernels.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from engine.errors import ConfigError
from engine.model_spec.model_config import ModelConfig

# From this many rows a step, a layer with a batched copy multiplies by the copy: on the
# development CPU torch's packed int4 and int8 kernels ran at about the speed of a bf16 product at
# 8 rows and 2-3x slower at 64 (docs/measurements.md, "Measured reasons behind the code").
BATCHED_ROWS = 8


class QuantizedLinear(nn.Module):
    """A Linear whose weight is kept quantized; subclasses store their tensors and run their
    kernels: Triton on CUDA, torch's packed CPU ops elsewhere. On the CPU a layer may also keep a
    batched copy (`keep_batched_copy`): the same weights in bfloat16, for steps of many rows."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.on_cuda = weight.is_cuda
        self.format = type(self).__name__  # what its tensors hold, for the memory tab's weights line
        self.register_buffer("batched_weight", None)

    def keep_batched_copy(self) -> None:
        """Keep the weights the kernel applies as a dense bfloat16 [out, in] tensor. They are read
        off the kernel itself, as its product with the identity, so the copy holds exactly the
        values the quantized path multiplies by (rounded to bf16, as the activations are)."""
        identity = torch.eye(self.in_features, dtype=torch.float32)
        self.batched_weight = self.matmul_cpu(identity).t().to(torch.bfloat16).contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.batched_weight is not None and x.numel() >= BATCHED_ROWS * self.in_features:
            out = functional.linear(x.to(torch.bfloat16), self.batched_weight).to(x.dtype)
        else:
            out = self.matmul_cuda(x) if self.on_cuda else self.matmul_cpu(x)
        return out if self.bias is None else out + self.bias

    def matmul_cuda(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def matmul_cpu(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class QuantizationMethod:
    name: str
    description: str
    bits_per_weight: int
    group_sizes: tuple[int, ...] = ()  # the group sizes it accepts; empty: not grouped
    quantizes_lm_head: bool = True  # whether quantize_lm_head may be set with it
    # The SmoothQuant pass (engine/execution/smoothing.py) runs before quantizing: activations are quantized too.
    needs_activation_smoothing: bool = False
    # The format the LM head is quantized to under quantize_lm_head (None: left as it is).
    lm_head_method: str | None = "int8"
    # Runs this project's kernels (kernels/); bitsandbytes' layers are there to compare against.
    own_kernels: bool = True
    # Whether a batched bf16 copy (EngineConfig.batched_bf16_copy) speeds its many-row steps up:
    # the weight-only packed CPU kernels; w8a8's integer product is faster than bf16 already.
    batched_copy_helps: bool = False

    def unavailable_reason(self) -> str | None:
        """Why this method cannot run on this machine, or None."""
        return None

    def check(
        self,
        config: ModelConfig,
        group_size: int,
        quantize_lm_head: bool,
        batched_copy: bool = False,
        on_cuda: bool = False,
    ) -> None:
        """Refuse combinations that cannot run, naming the layer, the size and what to choose instead."""
        if batched_copy and (on_cuda or not self.batched_copy_helps):
            raise ConfigError(
                f"batched_bf16_copy: only with int4 or int8 on the CPU, not {self.name}"
                f"{' on CUDA' if on_cuda and self.batched_copy_helps else ''}"
            )
        if quantize_lm_head and not self.quantizes_lm_head:
            raise ConfigError(f"quantize_lm_head: not supported with {self.name}")
        reason = self.unavailable_reason()
        if reason:
            raise ConfigError(f"quantization: {self.name} cannot run here ({reason})")
        if not self.group_sizes:
            return
        if group_size not in self.group_sizes:
            raise ConfigError(
                f"group_size: {self.name} supports {', '.join(map(str, self.group_sizes))}, got {group_size}"
            )
        widths = {
            "q/k/v/gate/up_proj": config.hidden_size,
            "o_proj": config.num_heads * config.head_dim,
            "down_proj": config.intermediate_size,
        }
        for layer, width in widths.items():
            if width % group_size:
                fits = [size for size in self.group_sizes if all(w % size == 0 for w in widths.values())]
                raise ConfigError(
                    f"group_size: {group_size} does not divide {layer}'s input width {width}; choose "
                    f"{' or '.join(map(str, fits)) if fits else 'int8'} instead"
                )

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        """The quantized replacement of a Linear with this weight [out, in] and bias."""
        raise NotImplementedError


class Unquantized(QuantizationMethod):
    """Leaves every layer as it is (quantize_lm_head has nothing to do with it)."""

    name = "none"
    description = "weights in the compute dtype"
    bits_per_weight = 16  # on a GPU; the memory model and the simulator assume bf16 / fp16
    lm_head_method = None
