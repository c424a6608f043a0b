"""transformers' model and tokenizer for a bundled GGUF, loaded from the same file the engine
reads (dequantized to float32): the reference the real-model tests compare against."""

from __future__ import annotations

import torch

from engine.loading.model_source import resolve_model_path


def transformers_reference(alias: str):
    """(model in eval mode, tokenizer) for the bundled model `alias`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(alias)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return model.eval(), tokenizer
