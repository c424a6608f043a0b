"""Quantization of the attention and MLP projections (and optionally the LM head), applied at
load time. Each option keeps real low-bit tensors and runs kernels that read them. With
`quantize_lm_head`, the LM head is quantized to int8 weights too: W8A8 for w8a8, weight-only
for the others.

  none      weights in the compute dtype
  int8      W8A16: int8, symmetric per output channel
  int4      W4A16: 4-bit, a scale and a minimum per group of `group_size` inputs, two per byte
  w8a8      int8 weights per output channel and int8 activations per token, quantized on the
            fly: the product itself runs on integers, which pays when it is compute-bound
            (batched decode, prefill) rather than bound by reading the weights. The model is
            smoothed first (engine.smoothing, SmoothQuant), calibrated at load
  bnb-int8  bitsandbytes LLM.int8() (Linear8bitLt, outlier threshold 6.0)
  bnb-nf4   bitsandbytes NF4 (Linear4bit, blocksize 64)
"""

from __future__ import annotations

import torch
from torch import nn

from engine.config import QUANTIZATION_METHODS
from engine.errors import ConfigError
from engine.model_config import ModelConfig
from kernels.quant import quantize_int4, quantize_int8
from kernels.quant_matmul import int4_matmul_cpu, int8_matmul_cpu, prepare_int4_cpu, w8a8_matmul_cpu

INT4_GROUP_SIZES = (32, 64, 128)
PROJECTIONS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")  # after CausalLM.fuse_projections


def check_quantization(method: str, group_size: int, config: ModelConfig, quantize_lm_head: bool, device: torch.device) -> None:
    """Refuse combinations that cannot run, naming the layer, the size and what to choose instead."""
    if method not in QUANTIZATION_METHODS:
        raise ConfigError(f"quantization: expected one of {', '.join(QUANTIZATION_METHODS)}, got {method!r}")
    if method == "int4":
        if group_size not in INT4_GROUP_SIZES:
            raise ConfigError(f"group_size: int4 supports {', '.join(map(str, INT4_GROUP_SIZES))}, got {group_size}")
        widths = {"q/k/v/gate/up_proj": config.hidden_size, "o_proj": config.num_heads * config.head_dim, "down_proj": config.intermediate_size}
        for layer, width in widths.items():
            if width % group_size:
                fits = [size for size in INT4_GROUP_SIZES if width % size == 0 and all(w % size == 0 for w in widths.values())]
                raise ConfigError(
                    f"group_size: {group_size} does not divide {layer}'s input width {width}; choose "
                    f"{' or '.join(map(str, fits)) if fits else 'int8'} instead"
                )
    if method.startswith("bnb-"):
        try:
            import bitsandbytes  # noqa: F401
        except Exception as exc:  # bitsandbytes raises assorted errors where its native library cannot load
            raise ConfigError(f"quantization: {method} needs bitsandbytes, which cannot run here ({exc}); choose int8 or int4") from exc
    if quantize_lm_head and method.startswith("bnb-"):
        raise ConfigError("quantize_lm_head: supported for int8, int4 and w8a8 only")


class QuantizedLinear(nn.Module):
    """A Linear whose weight is int8 or packed int4; the matmul runs on the quantized tensors
    (and, for w8a8, on the activations quantized per token)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, method: str, group_size: int):
        super().__init__()
        self.method, self.group_size = method, group_size
        self.out_features, self.in_features = weight.shape
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.on_cuda = weight.is_cuda
        if method == "w8a8":  # _int_mm and the Triton kernel both take the [N, K] int8 weight as stored
            q, scales = quantize_int8(weight)
            self.register_buffer("qweight", q)
            self.register_buffer("scales", scales)
        elif method == "int8":
            q, scales = quantize_int8(weight)
            self.register_buffer("qweight", q)
            self.register_buffer("scales", scales if self.on_cuda else scales.to(torch.bfloat16))
        else:
            packed, scales, minimums = quantize_int4(weight, group_size)
            if self.on_cuda:
                self.register_buffer("qweight", packed)
                self.register_buffer("scales", scales)
                self.register_buffer("minimums", minimums)
            else:
                cpu_packed, scales_and_zeros = prepare_int4_cpu(packed, scales, minimums)
                self.register_buffer("qweight", cpu_packed)
                self.register_buffer("scales_and_zeros", scales_and_zeros)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.on_cuda:
            from kernels.triton_quant_matmul import int4_matmul_triton, int8_matmul_triton, w8a8_matmul_triton

            if self.method == "w8a8":
                out = w8a8_matmul_triton(x, self.qweight, self.scales)
            elif self.method == "int8":
                out = int8_matmul_triton(x, self.qweight, self.scales)
            else:
                out = int4_matmul_triton(x, self.qweight, self.scales, self.minimums, self.group_size)
        elif self.method == "w8a8":
            out = w8a8_matmul_cpu(x, self.qweight, self.scales)
        elif self.method == "int8":
            out = int8_matmul_cpu(x, self.qweight, self.scales)
        else:
            out = int4_matmul_cpu(x, self.qweight, self.scales_and_zeros, self.group_size, self.out_features)
        return out if self.bias is None else out + self.bias


def _bitsandbytes_linear(linear: nn.Linear, method: str, dtype: torch.dtype) -> nn.Module:
    import bitsandbytes as bnb

    bias = linear.bias is not None
    if method == "bnb-int8":
        module = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, bias=bias, has_fp16_weights=False, threshold=6.0)
        module.weight = bnb.nn.Int8Params(linear.weight.data.float().cpu(), requires_grad=False, has_fp16_weights=False)
    else:
        module = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=bias, quant_type="nf4", compute_dtype=dtype)
        module.weight = bnb.nn.Params4bit(linear.weight.data.float().cpu(), requires_grad=False, quant_type="nf4", blocksize=64)
    if bias:
        module.bias = nn.Parameter(linear.bias.data.clone(), requires_grad=False)
    return module.to(linear.weight.device)


def quantize_model(model: nn.Module, method: str, group_size: int, quantize_lm_head: bool, progress,
                   head_weight: torch.Tensor | None = None) -> None:
    """Replace the projections (and the LM head when asked) in place, reporting progress.
    `head_weight`: the head to quantize when smoothing rescaled a copy of it (engine.smoothing)."""
    if method == "none":
        return
    layers = model.model.layers
    for index, layer in enumerate(layers):
        for owner in (layer.self_attn, layer.mlp):
            for name in PROJECTIONS:
                linear = getattr(owner, name, None)
                if linear is None:
                    continue
                if method.startswith("bnb-"):
                    replacement = _bitsandbytes_linear(linear, method, linear.weight.dtype)
                else:
                    replacement = QuantizedLinear(linear.weight.data, linear.bias, method, group_size)
                setattr(owner, name, replacement)
        progress("quantize", (index + 1) / len(layers))
    if quantize_lm_head:
        # int8 weights whatever the projections' method. On SmolLM2 with int4 g32 projections, an
        # int4 head moved perplexity by +4.4% (top-1 agreement 89%), an int8 weight-only head by
        # +0.28% and a W8A8 head by +0.88% (workbench quality, 4,082 tokens); llama.cpp's Q4_1 file
        # of the same model keeps its embedding at 8 bits (Q8_0) too. w8a8 keeps its integer
        # product for the head (+1.63% perplexity against +1.21% for w8a8 alone): at 256 rows the
        # weight-only int8 kernel ran 2.3x slower than fp32, the integer product 2.5x faster.
        if head_weight is None:
            head_weight = model.model.embed_tokens.weight if model.config.tie_word_embeddings else model.lm_head.weight
        model.quantized_head = QuantizedLinear(head_weight.data, None, "w8a8" if method == "w8a8" else "int8", group_size)


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the model's stored weights as the kernels read them: packed weights, scales and
    zeros included, tied tensors counted once, computed tables (rotary cos/sin) left out."""
    seen, total = set(), 0
    for tensor in model.state_dict().values():
        if isinstance(tensor, torch.Tensor) and tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            total += tensor.nbytes
    return total
