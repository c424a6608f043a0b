"""The Hugging Face export of the bundled GGUF model reads back as the same model."""

from __future__ import annotations

import json

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams

pytestmark = pytest.mark.slow  # reads SmolLM2


def test_the_exported_directory_is_the_same_model(tmp_path, smollm_source):
    from workbench.export_hf import export_hf_directory

    directory = export_hf_directory(smollm_source, tmp_path / "smollm2-hf", dtype="float32")
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_key_value_heads"] == 3
    assert {path.name for path in directory.iterdir()} == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    }
    # The dequantized weights on both sides: "auto" would run the GGUF file as int4.
    settings = dict(dtype="float32", device="cpu", kv_cache_memory=32 << 20, max_model_len=512, quantization="none")
    original = LLMEngine(EngineConfig(**settings), source=smollm_source)
    exported = LLMEngine(EngineConfig(model=str(directory), **settings))
    prompt = original.tokenizer.encode("The three primary colours are")
    assert exported.tokenizer.encode("The three primary colours are") == prompt
    logits = original.executor.sequence_logits(prompt, 16)
    assert (exported.executor.sequence_logits(prompt, 16) - logits).abs().max().item() < 1e-4
    greedy = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    assert exported.generate([prompt], greedy)[0].token_ids == original.generate([prompt], greedy)[0].token_ids
