"""The architecture registry: one entry per architecture, found by either file's name for it, and
refusals that name what the file says and what is supported."""

from __future__ import annotations

import json

import pytest

from engine.architectures import ARCHITECTURES, architecture_named, architecture_of_model_type
from engine.errors import ModelLoadError
from engine.loading.huggingface import read_hf_tokenizer


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
