"""Write a model as a Hugging Face directory (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, generation_config.json), so that servers that read that layout (vLLM,
SGLang) can serve the bundled GGUF model, and both sides of a comparison run the same weights.

The weights are the GGUF file's, dequantized (the loader also undoes llama.cpp's rotary row
permutation), stored in bfloat16 or float32. Reading the directory back with our own loader gives
the same model, and transformers reads it as the model it came from: tests/workbench/quality/test_export_hf.py
checks the logits for each architecture.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from engine.errors import ConfigError
from engine.loading.model_file import ModelSource
from engine.model_spec.architectures import ARCHITECTURES

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def export_hf_directory(source: ModelSource, out_dir: Path, dtype: str = "bfloat16") -> Path:
    if dtype not in DTYPES:
        raise ConfigError(f"dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    if source.tokenizer is None:
        raise ConfigError(f"{source.path}: the model has no tokenizer to export")
    config, tokenizer = source.config, source.tokenizer
    architecture = ARCHITECTURES[config.architecture]
    eos = list(config.eos_token_ids or tokenizer.eos_token_ids)
    hf_config = {
        "architectures": [architecture.hf_class],
        "model_type": architecture.hf_model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "rope_theta": config.rope_theta,
        "rope_scaling": _rope_scaling(source),
        "rms_norm_eps": config.rms_norm_eps,
        "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": config.tie_word_embeddings,
        "attention_bias": config.attention_bias,
        "hidden_act": "silu",
        "bos_token_id": config.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
        "torch_dtype": dtype,
        **architecture.hf_settings(config),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    tensors = {
        name: tensor.to(DTYPES[dtype]).contiguous()
        for name, tensor in source.tensors.items()
        if not (config.tie_word_embeddings and name == "lm_head.weight")
    }
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.backend.save(str(out_dir / "tokenizer.json"))
    token = tokenizer.backend.id_to_token
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": token(tokenizer.bos_token_id) if tokenizer.bos_token_id is not None else None,
                "eos_token": token(eos[0]) if eos else None,
                "add_bos_token": tokenizer.add_bos_token,
                "chat_template": tokenizer.chat_template,
                "model_max_length": config.max_position_embeddings,
            },
            indent=2,
        )
        + "\n"
    )
    (out_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": config.bos_token_id, "eos_token_id": eos}, indent=2) + "\n"
    )
    return out_dir


def _rope_scaling(source: ModelSource) -> dict | None:
    """Linear scaling (one divisor for every frequency) in config.json's terms; Llama 3's
    per-frequency divisors cannot be written back as its four settings, so that export is refused."""
    divisors = set(source.config.rope_frequency_divisors)
    if not divisors:
        return None
    if len(divisors) == 1:
        return {"rope_type": "linear", "factor": divisors.pop()}
    raise ConfigError(f"{source.path}: exporting Llama 3's per-frequency RoPE scaling is not supported")
