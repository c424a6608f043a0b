"""Read a Hugging Face model directory: config.json, *.safetensors (single or sharded), tokenizer.json.

Only safetensors are read: pickle-based `.bin` checkpoints can run code when loaded, so they are
refused with a message rather than unpickled.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from engine.errors import ModelLoadError
from engine.loading.model_file import ModelSource, ProgressCallback
from engine.loading.tokenizer import Tokenizer
from engine.model_spec.architectures import architecture_of_model_type, hf_rope_settings
from engine.model_spec.model_config import ModelConfig
from engine.platform.device import dtype_name

_UNSCALED = "default"
# Settings whose effect the decoder does not implement: refused by name rather than ignored.
_UNSUPPORTED_WHEN_SET = (
    "final_logit_softcapping",
    "attn_logit_softcapping",
    "use_bidirectional_attention",
    "use_sliding_window",  # Qwen2's window over its upper layers
    "num_experts",
    "num_local_experts",
    "kv_lora_rank",  # multi-head latent attention (DeepSeek)
)


def read_hf_directory(directory: Path, progress: ProgressCallback) -> ModelSource:
    progress("read file", 0.0)
    files = _safetensors_files(directory)
    config = _model_config(directory)
    tensors: dict[str, torch.Tensor] = {}
    stored: Counter[str] = Counter()
    elements: Counter[torch.dtype] = Counter()
    for index, file in enumerate(files):
        try:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():
                    # Kept in the file's dtype: a bf16 7B model stays 14 GB here, not 28 GB of float32.
                    tensor = handle.get_tensor(name)
                    stored[dtype_name(tensor.dtype)] += 1
                    elements[tensor.dtype] += tensor.numel()
                    tensors[name] = tensor
        except (SafetensorError, OSError, ValueError) as exc:
            raise ModelLoadError(
                f"{file}: not a readable safetensors file, perhaps truncated or corrupt ({exc})"
            ) from exc
        progress("read file", (index + 1) / len(files))
    tokenizer = Tokenizer.from_hf_directory(directory, config.eos_token_ids)
    most_stored = elements.most_common(1)[0][0] if elements else None
    weights_dtype = most_stored if most_stored in (torch.bfloat16, torch.float16) else None
    return ModelSource(directory, "safetensors", config, tensors, tokenizer, dict(stored), weights_dtype=weights_dtype)


def read_hf_tokenizer(directory: Path) -> Tokenizer | None:
    """The directory's tokenizer alone (no weight is read); None without tokenizer.json."""
    return Tokenizer.from_hf_directory(directory, _model_config(directory).eos_token_ids)


def _model_config(directory: Path) -> ModelConfig:
    config_file = directory / "config.json"
    if not config_file.exists():
        raise ModelLoadError(f"{directory}: no config.json; expected a Hugging Face model directory")
    try:
        raw = json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{config_file}: not valid JSON ({exc})") from exc
    architecture = architecture_of_model_type(raw.get("model_type"), str(config_file))
    for name in _UNSUPPORTED_WHEN_SET:
        if raw.get(name):
            raise ModelLoadError(f"{config_file}: {name} = {raw[name]!r} is not supported")

    def key(name: str) -> object:
        if name not in raw:
            raise ModelLoadError(f"{config_file}: key {name!r} is missing")
        return raw[name]

    heads = int(key("num_attention_heads"))
    hidden = int(key("hidden_size"))
    layers = int(key("num_hidden_layers"))
    eos = raw.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
    rope = hf_rope_settings(raw)
    global_rope = rope.get("full_attention", rope) if architecture.rope_per_layer_type else rope
    head_dim = int(raw.get("head_dim") or hidden // heads)
    rope_theta = float(global_rope.get("rope_theta", raw.get("rope_theta", 10000.0)))
    config = ModelConfig(
        architecture=architecture.name,
        vocab_size=int(key("vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(key("intermediate_size")),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        rope_theta=rope_theta,
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(key("max_position_embeddings")),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", architecture.tied_by_default)),
        attention_bias=architecture.always_attention_bias or bool(raw.get("attention_bias", False)),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=eos_ids,
        qk_norm=architecture.qk_norm,
        rope_frequency_divisors=_rope_divisors(global_rope, head_dim, rope_theta, config_file),
    )
    return architecture.from_hf(config, raw, config_file)


def _rope_divisors(rope: dict, head_dim: int, theta: float, config_file: Path) -> tuple[float, ...]:
    """The frequency divisors of a config's RoPE scaling: none, linear, or Llama 3's; any other
    kind (YaRN, dynamic NTK, LongRoPE) is refused by name."""
    scaling = rope.get("rope_type", rope.get("type", _UNSCALED))

    def setting(name: str) -> float:
        if name not in rope:
            raise ModelLoadError(f"{config_file}: rope_scaling ({scaling}) is missing {name!r}")
        return float(rope[name])

    if scaling == _UNSCALED:
        return ()
    if scaling == "linear":
        return (setting("factor"),) * (head_dim // 2)
    if scaling == "llama3":
        return _llama3_rope_divisors(
            head_dim,
            theta,
            setting("factor"),
            setting("low_freq_factor"),
            setting("high_freq_factor"),
            int(setting("original_max_position_embeddings")),
        )
    raise ModelLoadError(f"{config_file}: rope_type {scaling!r} is not supported; expected default, linear or llama3")


def _llama3_rope_divisors(
    head_dim: int,
    theta: float,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_positions: int,
) -> tuple[float, ...]:
    """Llama 3.1's RoPE scaling as divisors of each frequency: wavelengths shorter than
    original / high_freq_factor keep theirs, those longer than original / low_freq_factor are
    divided by `factor`, and those between are interpolated smoothly (transformers'
    `_compute_llama3_parameters`, llama.cpp's rope_freqs)."""
    divisors = []
    for pair in range(head_dim // 2):
        wavelength = 2 * math.pi * theta ** (2 * pair / head_dim)
        if wavelength < original_max_positions / high_freq_factor:
            divisors.append(1.0)
        elif wavelength > original_max_positions / low_freq_factor:
            divisors.append(factor)
        else:
            smooth = (original_max_positions / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    return tuple(divisors)


def _safetensors_files(directory: Path) -> list[Path]:
    index_file = directory / "model.safetensors.index.json"
    if index_file.exists():
        try:
            weight_map = json.loads(index_file.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as exc:
            raise ModelLoadError(f"{index_file}: expected JSON with a 'weight_map' ({exc})") from exc
        files = [directory / name for name in sorted(set(weight_map.values()))]
        missing = [str(file) for file in files if not file.exists()]
        if missing:
            raise ModelLoadError(f"{index_file}: lists shards that do not exist: {', '.join(missing)}")
        return files
    files = sorted(directory.glob("*.safetensors"))
    if files:
        return files
    if any(directory.glob("*.bin")):
        raise ModelLoadError(
            f"{directory}: only pickle .bin weights found; they are never unpickled, convert to safetensors"
        )
    raise ModelLoadError(f"{directory}: no *.safetensors weights found")
