"""Quantization of the attention and MLP projections (and optionally the LM head), applied at
load time: the registry of methods, and applying one to a model.

Every place that needs to know the formats (config validation, the memory model, the simulator,
the CLI, the engine panel, the benchmarks) reads `METHODS`; each method's module says what it is
(engine/quantization/int8.py, int4.py, w4a8.py, w8a8.py, bitsandbytes.py). With `quantize_lm_head`, the
LM head is quantized too, to the method's `lm_head_method` (int8 weights; W8A8 for w8a8).
"""

from __future__ import annotations

import torch
from torch import nn

from engine.errors import ConfigError
from engine.model_spec.model_config import ModelConfig
from engine.platform.device import dtype_name
from engine.quantization.base import BATCHED_ROWS, QuantizationMethod, QuantizedLinear, Unquantized
from engine.quantization.bitsandbytes import BitsAndBytesInt8, BitsAndBytesNF4
from engine.quantization.int4 import Int4WeightOnly
from engine.quantization.int8 import Int8Embedding, Int8WeightOnly
from engine.quantization.w4a8 import W4A8
from engine.quantization.w8a8 import W8A8

METHODS: dict[str, QuantizationMethod] = {
    method.name: method
    for method in (
        Unquantized(),
        Int8WeightOnly(),
        Int4WeightOnly(),
        W4A8(),
        W8A8(),
        BitsAndBytesInt8(),
        BitsAndBytesNF4(),
    )
}
UNQUANTIZED = Unquantized.name  # the reference every quantized option is compared with
PROJECTIONS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")  # after CausalLM.fuse_projections


def get_method(name: str) -> QuantizationMethod:
    if name not in METHODS:
        raise ConfigError(f"quantization: expected one of {', '.join(METHODS)}, got {name!r}")
    return METHODS[name]


def weight_format(name: str, group_size: int) -> tuple[int, int | None]:
    """(bits per weight, group size or None) of a resolved quantization setting: what the memory
    model's weight estimate takes (engine.memory.weight_bytes_estimate)."""
    method = get_method(name)
    return method.bits_per_weight, group_size if method.group_sizes else None


def describe_quantization(name: str, group_size: int, quantize_lm_head: bool, batched_copy: bool = False) -> str:
    """E.g. "int4 g32 + int8 head, bf16 copy from 8 rows", "none"."""
    method = get_method(name)
    text = f"{name} g{group_size}" if method.group_sizes else name
    text = f"{text} + {method.lm_head_method} head" if quantize_lm_head else text
    return f"{text}, bf16 copy from {BATCHED_ROWS} rows" if batched_copy else text


def own_methods() -> list[str]:
    """The methods that run this project's kernels (the benchmarks' rows)."""
    return [name for name, method in METHODS.items() if method.own_kernels]


def all_group_sizes() -> list[int]:
    """Every group size some method accepts, for choosers."""
    return sorted({size for method in METHODS.values() for size in method.group_sizes})


def check_quantization(
    name: str,
    group_size: int,
    config: ModelConfig,
    quantize_lm_head: bool,
    batched_copy: bool = False,
    on_cuda: bool = False,
) -> None:
    get_method(name).check(config, group_size, quantize_lm_head, batched_copy, on_cuda)


def batched_copy_bytes(config: ModelConfig, quantize_lm_head: bool) -> int:
    """What a batched bf16 copy of the projections (and of the head, when quantized) costs."""
    head = config.vocab_size * config.hidden_size if quantize_lm_head else 0
    return 2 * (config.num_projection_parameters + head)


def has_batched_copy(model: nn.Module) -> bool:
    return any(isinstance(module, QuantizedLinear) and module.batched_weight is not None for module in model.modules())


def quantize_model(
    model: nn.Module,
    name: str,
    group_size: int,
    quantize_lm_head: bool,
    progress,
    head_weight: torch.Tensor | None = None,
    batched_copy: bool = False,
) -> None:
    """Replace the projections (and the LM head when asked) in place, reporting progress.
    `head_weight`: the head to quantize when smoothing rescaled a copy of it (engine.smoothing).
    `batched_copy`: every quantized layer keeps a bf16 copy for many-row steps (QuantizedLinear)."""
    method = get_method(name)
    if isinstance(method, Unquantized):
        return
    layers = model.model.layers
    for index, layer in enumerate(layers):
        for owner in (layer.self_attn, layer.mlp):
            for projection in PROJECTIONS:
                linear = getattr(owner, projection, None)
                if linear is not None:
                    setattr(
                        owner, projection, _quantized(method, linear.weight.data, linear.bias, group_size, batched_copy)
                    )
        progress("quantize", (index + 1) / len(layers))
    if quantize_lm_head:
        # int8 rather than the method's own bits: a 4-bit head costs far more quality than an
        # 8-bit one (docs/quantization.md), and llama.cpp's Q4_1 file of the same model keeps its
        # embedding at 8 bits (Q8_0) too.
        tied = model.config.tie_word_embeddings
        table = model.model.embed_tokens.weight
        model.quantized_head = _quantized(
            get_method(method.lm_head_method),
            (head_weight if head_weight is not None else table if tied else model.lm_head.weight).data,
            None,
            group_size,
            batched_copy,
        )
        if tied:
            # The float table was kept for the head it was tied to; the lookups need only an int8
            # one (Gemma 3's: 671 MB of float32 -> 189 MB).
            model.model.embed_tokens = Int8Embedding(table.data, table.dtype)


def _quantized(
    method: QuantizationMethod, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int, batched_copy: bool
) -> nn.Module:
    layer = method.create_linear(weight, bias, group_size)
    if batched_copy:
        layer.keep_batched_copy()
    return layer


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the model's stored weights as the kernels read them: packed weights, scales and
    zeros included, tied tensors counted once, computed tables (rotary cos/sin) left out."""
    return sum(weight_parts(model).values())


_BATCHED_COPY_PART = "bf16 batched copy"


def weight_parts(model: nn.Module) -> dict[str, int]:
    """`weight_bytes` by what the tensors hold: each quantized format (its packed weights with
    their scales), the batched bf16 copy, and the tensors left unquantized (embeddings, norms) by
    dtype; e.g. {"int4 g32 (packed, scales and minimums)": 52.9e6, "int8 (weights and scales)":
    28.4e6, "bf16 batched copy": 269e6, "float32 unquantized": 127e6}."""
    modules = dict(model.named_modules())
    seen, parts = set(), {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if not isinstance(tensor, torch.Tensor) or tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        # The module that holds it: the longest prefix of the name that is a module (bitsandbytes
        # keeps its quantization state under the weight: "...q_proj.weight.absmax").
        path = name.split(".")
        depth = next(depth for depth in range(len(path) - 1, -1, -1) if ".".join(path[:depth]) in modules)
        owner, attribute = modules[".".join(path[:depth])], path[depth]
        if isinstance(owner, QuantizedLinear):
            part = _BATCHED_COPY_PART if attribute == "batched_weight" else owner.format
        elif isinstance(owner, Int8Embedding):
            part = owner.format
        elif tensor.is_floating_point():
            part = f"{dtype_name(tensor.dtype)} unquantized"
        else:  # another library's quantized layer (bitsandbytes)
            part = f"{dtype_name(tensor.dtype)} ({type(owner).__name__})"
        parts[part] = parts.get(part, 0) + tensor.nbytes
    return parts
