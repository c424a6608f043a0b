"""Read a llama.cpp GGUF file: shape from metadata, tensors dequantized to float32, tokenizer.

The container is read by engine/loading/gguf_file.py; dequantization (Q4_0, Q4_1, Q8_0, K-quants,
...) is the `gguf` package's own numpy code, the reference implementation maintained with llama.cpp.
Tensor names become Hugging Face's, and values their conventions: Llama's q/k rows un-permuted,
Gemma's norms back to the weight that (1 + weight) multiplies (llama.cpp's converter adds the 1).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import gguf
import numpy as np
import torch

from engine.errors import ModelLoadError
from engine.loading.gguf_file import GGUFTensor, read_gguf_file
from engine.loading.model_file import ModelSource, ProgressCallback
from engine.loading.tokenizer import Tokenizer
from engine.model_config import SUPPORTED_ARCHITECTURES, ModelConfig, with_gemma3_traits

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_QK_NORM_NAMES = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
# Gemma 3 names its norms differently: "ffn_norm" is the norm before the MLP, and the norms after
# attention and the MLP have names of their own.
_LAYER_NAMES_BY_ARCHITECTURE = {
    "qwen3": {**_LAYER_NAMES, **_QK_NORM_NAMES},
    "gemma3": {
        **_LAYER_NAMES,
        **_QK_NORM_NAMES,
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    },
}
_PROJECTIONS = tuple(name for name in _LAYER_NAMES if not name.endswith("_norm"))
# Gemma 3's local layers: all but every sixth (llama.cpp's swa pattern, transformers' layer_types).
_GEMMA3_GLOBAL_EVERY = 6
_GEMMA3_LOCAL_ROPE_THETA = 10_000.0
_UNSCALED_ROPE = "none"  # llama.cpp's rope.scaling.type when RoPE is not scaled
# Llama 3.1's RoPE scaling, as llama.cpp's converter stores it: a divisor per frequency.
_ROPE_DIVISORS_TENSOR = "rope_freqs.weight"
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def read_gguf(path: Path, progress: ProgressCallback) -> ModelSource:
    progress("read file", 0.0)
    file = read_gguf_file(path)
    metadata = file.metadata
    config = _model_config(metadata, file.tensors, path)
    tokenizer = Tokenizer.from_gguf_metadata(metadata, path)
    tensors: dict[str, torch.Tensor] = {}
    for index, tensor in enumerate(file.tensors):
        if tensor.name == _ROPE_DIVISORS_TENSOR:  # read into the config, not a weight
            continue
        name = _hf_name(tensor.name, config.architecture, path)
        values = _dequantize(tensor, path)
        if config.norm_weight_offset and name.endswith("norm.weight"):
            values = values - config.norm_weight_offset
        # llama.cpp's converter permutes Llama's q/k rows to interleave rotary pairs; undo it so
        # the weights match the Hugging Face rotate-half layout our decoder uses.
        if config.architecture == "llama" and tensor.name.endswith(("attn_q.weight", "attn_q.bias")):
            values = _unpermute_rotary_rows(values, config.num_heads)
        elif config.architecture == "llama" and tensor.name.endswith(("attn_k.weight", "attn_k.bias")):
            values = _unpermute_rotary_rows(values, config.num_kv_heads)
        tensors[name] = torch.from_numpy(np.array(values, dtype=np.float32))  # a copy: the file is mapped read-only
        progress("dequantize", (index + 1) / len(file.tensors))
    stored = Counter(tensor.tensor_type.name for tensor in file.tensors)
    types = {tensor.name: tensor.tensor_type.name for tensor in file.tensors}
    projections = Counter(
        kind
        for name, kind in types.items()
        if (match := _LAYER_TENSOR.fullmatch(name)) and match.group(2) in _PROJECTIONS
    )
    head_type = types.get("output.weight", types.get("token_embd.weight"))
    return ModelSource(
        path,
        "gguf",
        config,
        tensors,
        tokenizer,
        dict(stored),
        projection_type=projections.most_common(1)[0][0] if projections else None,
        head_type=head_type,
    )


def read_gguf_tokenizer(path: Path) -> Tokenizer:
    """The file's tokenizer alone, from its metadata (no tensor is read)."""
    return Tokenizer.from_gguf_metadata(read_gguf_file(path, with_tensors=False).metadata, path)


def _model_config(metadata: dict, tensors: list[GGUFTensor], path: Path) -> ModelConfig:
    architecture = metadata.get("general.architecture")
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise ModelLoadError(
            f"{path}: architecture {architecture!r} is not supported; expected one of "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}"
        )

    def key(name: str, default: object = None) -> object:
        value = metadata.get(f"{architecture}.{name}", default)
        if value is None:
            raise ModelLoadError(f"{path}: metadata key {architecture}.{name} is missing")
        return value

    hidden = int(key("embedding_length"))
    heads = int(key("attention.head_count"))
    tensor_names = {tensor.name for tensor in tensors}
    layers = int(key("block_count"))
    eos = metadata.get("tokenizer.ggml.eos_token_id")
    head_dim = int(key("attention.key_length", hidden // heads))
    divisors = _rope_divisors(metadata, architecture, tensors, head_dim, path)
    config = ModelConfig(
        architecture=architecture,
        vocab_size=len(metadata.get("tokenizer.ggml.tokens", [])) or int(key("vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(key("attention.head_count_kv", heads)),
        head_dim=head_dim,
        rope_theta=float(key("rope.freq_base", 10000.0)),
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")),
        max_position_embeddings=int(key("context_length")),
        tie_word_embeddings="output.weight" not in tensor_names,
        attention_bias="blk.0.attn_q.bias" in tensor_names,
        bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=() if eos is None else (int(eos),),
        qk_norm=architecture == "qwen3",
        rope_frequency_divisors=divisors,
    )
    if architecture != "gemma3":
        return config
    return with_gemma3_traits(
        config,
        # The file does not store query_pre_attn_scalar; llama.cpp's rule: head_dim, except for the
        # 27B model (62 layers), which scales by hidden / heads.
        query_pre_attn_scalar=hidden / heads if layers == 62 else config.head_dim,
        sliding_window=int(key("attention.sliding_window")),
        sliding_layers=tuple(layer for layer in range(layers) if (layer + 1) % _GEMMA3_GLOBAL_EVERY),
        local_rope_theta=_GEMMA3_LOCAL_ROPE_THETA,
    )


def _rope_divisors(
    metadata: dict, architecture: str, tensors: list[GGUFTensor], head_dim: int, path: Path
) -> tuple[float, ...]:
    """RoPE's frequency divisors (ModelConfig.rope_frequency_divisors): from the rope_freqs tensor
    (Llama 3.1), or a linear scaling's factor; other scalings (YaRN) are refused by name."""
    scaling = metadata.get(f"{architecture}.rope.scaling.type", _UNSCALED_ROPE)
    if scaling == "linear":
        factor = metadata.get(f"{architecture}.rope.scaling.factor")
        if factor is None:
            raise ModelLoadError(f"{path}: metadata {architecture}.rope.scaling.factor is missing (linear scaling)")
        return (float(factor),) * (head_dim // 2)
    if scaling != _UNSCALED_ROPE:
        raise ModelLoadError(
            f"{path}: metadata {architecture}.rope.scaling.type is {scaling!r}; "
            "supported: 'none', 'linear' and Llama 3's rope_freqs tensor"
        )
    stored = next((tensor for tensor in tensors if tensor.name == _ROPE_DIVISORS_TENSOR), None)
    if stored is None:
        return ()
    divisors = _dequantize(stored, path).reshape(-1)
    if divisors.shape[0] != head_dim // 2:
        raise ModelLoadError(
            f"{path}: tensor {_ROPE_DIVISORS_TENSOR} has {divisors.shape[0]} values; "
            f"expected head_dim / 2 = {head_dim // 2}"
        )
    return tuple(float(value) for value in divisors)


def _hf_name(gguf_name: str, architecture: str, path: Path) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    names = _LAYER_NAMES_BY_ARCHITECTURE.get(architecture, _LAYER_NAMES)
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    if match is None or match.group(2) not in names:
        raise ModelLoadError(f"{path}: unexpected tensor {gguf_name!r} for a {architecture} model")
    layer, part, kind = match.groups()
    return f"model.layers.{layer}.{names[part]}.{kind}"


def _dequantize(tensor: GGUFTensor, path: Path) -> np.ndarray:
    try:
        return gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as exc:
        raise ModelLoadError(
            f"{path}: tensor {tensor.name} is stored as {tensor.tensor_type.name}, which cannot be dequantized here"
        ) from exc


def _unpermute_rotary_rows(weights: np.ndarray, num_heads: int) -> np.ndarray:
    """Inverse of llama.cpp convert_hf_to_gguf's `permute`: per head, (2, half) rows -> (half, 2)."""
    half = weights.shape[0] // num_heads // 2
    grouped = weights.reshape(num_heads, half, 2, *weights.shape[1:])
    return grouped.swapaxes(1, 2).reshape(weights.shape)
