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
from engine.model_spec.architectures import LLAMA_LAYER_NAMES, Architecture, architecture_named
from engine.model_spec.model_config import ModelConfig

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_PROJECTIONS = tuple(name for name in LLAMA_LAYER_NAMES if not name.endswith("_norm"))
_UNSCALED_ROPE = "none"  # llama.cpp's rope.scaling.type when RoPE is not scaled
# Llama 3.1's RoPE scaling, as llama.cpp's converter stores it: a divisor per frequency.
_ROPE_DIVISORS_TENSOR = "rope_freqs.weight"
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def read_gguf(path: Path, progress: ProgressCallback) -> ModelSource:
    progress("read file", 0.0)
    file = read_gguf_file(path)
    metadata = file.metadata
    architecture = architecture_named(metadata.get("general.architecture"), str(path))
    config = _model_config(metadata, architecture, file.tensors, path)
    tokenizer = Tokenizer.from_gguf_metadata(metadata, path)
    tensors: dict[str, torch.Tensor] = {}
    for index, tensor in enumerate(file.tensors):
        if tensor.name == _ROPE_DIVISORS_TENSOR:  # read into the config, not a weight
            continue
        name = _hf_name(tensor.name, architecture, path)
        values = _dequantize(tensor, path)
        if config.norm_weight_offset and name.endswith("norm.weight"):
            values = values - config.norm_weight_offset
        # llama.cpp's converter permutes Llama's q/k rows to interleave rotary pairs; undo it so
        # the weights match the Hugging Face rotate-half layout our decoder uses.
        if architecture.permuted_qk and tensor.name.endswith(("attn_q.weight", "attn_q.bias")):
            values = _unpermute_rotary_rows(values, config.num_heads)
        elif architecture.permuted_qk and tensor.name.endswith(("attn_k.weight", "attn_k.bias")):
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


def _model_config(metadata: dict, architecture: Architecture, tensors: list[GGUFTensor], path: Path) -> ModelConfig:
    prefix = architecture.name  # metadata keys are the architecture's: "llama.block_count"

    def key(name: str, default: object = None) -> object:
        value = metadata.get(f"{prefix}.{name}", default)
        if value is None:
            raise ModelLoadError(f"{path}: metadata key {prefix}.{name} is missing")
        return value

    hidden = int(key("embedding_length"))
    heads = int(key("attention.head_count"))
    tensor_names = {tensor.name for tensor in tensors}
    eos = metadata.get("tokenizer.ggml.eos_token_id")
    head_dim = int(key("attention.key_length", hidden // heads))
    config = ModelConfig(
        architecture=architecture.name,
        vocab_size=len(metadata.get("tokenizer.ggml.tokens", [])) or int(key("vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_layers=int(key("block_count")),
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
        qk_norm=architecture.qk_norm,
        rope_frequency_divisors=_rope_divisors(metadata, prefix, tensors, head_dim, path),
    )
    return architecture.from_gguf(config, key)


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


def _hf_name(gguf_name: str, architecture: Architecture, path: Path) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    names = architecture.gguf_layer_names
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    if match is None or match.group(2) not in names:
        raise ModelLoadError(f"{path}: unexpected tensor {gguf_name!r} for a {architecture.name} model")
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
