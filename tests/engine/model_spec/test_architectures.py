"""The architecture registry: one entry per architecture, found by either file's name for it, and
refusals that name what the file says and what is supported."""

from __future__ import annotations

import json

import pytest

from engine.errors import ModelLoadError
from engine.loading.huggingface import read_hf_tokenizer
from engine.model_spec.architectures import ARCHITECTURES, architecture_named, architecture_of_model_type


def test_each_entry_is_found_by_its_gguf_name_and_its_model_type():
    for name, architecture in ARCHITECTURES.items():
        assert architecture_named(name, "f.gguf") is architecture
        assert architecture_of_model_type(architecture.hf_model_type, "config.json") is architecture
    assert architecture_of_model_type("gemma3_text", "config.json").name == "gemma3"


def test_an_unknown_architecture_is_refused_with_what_is_supported(tmp_path):
    with pytest.raises(ModelLoadError, match=r"f.gguf: architecture 'falcon' is not supported; expected one of llama"):
        architecture_named("falcon", "f.gguf")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "phi3"}))
    with pytest.raises(ModelLoadError, match=r"config.json: model_type 'phi3' is not supported; .*gemma3_text"):
        read_hf_tokenizer(tmp_path)


@pytest.mark.parametrize("pattern", [{}, {"sliding_window_pattern": 6}])
def test_gemma3s_layer_pattern_from_an_older_config_json(tmp_path, pattern):
    """Issue 58's planted bug: the default pattern off by one layer. A config.json from before
    `layer_types` (transformers 4.50) names only `sliding_window_pattern` (default 6): every sixth
    layer, counting from 1, is global. Gemma 3 270M's 18 layers: layers 5, 11 and 17 (from 0),
    as its GGUF file and its newer config.json say."""
    from engine.loading.huggingface import _model_config

    raw = {
        "model_type": "gemma3_text",
        "vocab_size": 262_144,
        "hidden_size": 640,
        "intermediate_size": 2048,
        "num_hidden_layers": 18,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "max_position_embeddings": 32_768,
        "sliding_window": 512,
        **pattern,
    }
    (tmp_path / "config.json").write_text(json.dumps(raw))
    config = _model_config(tmp_path)
    assert [layer for layer in range(18) if not config.is_sliding(layer)] == [5, 11, 17]
