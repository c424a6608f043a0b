"""The Hugging Face export reads back as the same model: the bundled GGUF model through our
loader, and each architecture through transformers."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams


@pytest.mark.slow  # reads SmolLM2
def test_the_exported_directory_is_the_same_model(tmp_path, smollm_source):
    from workbench.quality.export_hf import export_hf_directory

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


@pytest.mark.parametrize("architecture", ["llama", "qwen3", "gemma3", "gemma3-linear-rope", "mistral"])
def test_transformers_reads_the_export_as_the_model_it_came_from(tmp_path, architecture):
    """Each architecture's config.json as transformers (and so vLLM) reads it: a tiny random
    model read by our loader, exported, and loaded by transformers gives the original's logits."""
    import tokenizers
    import transformers

    from engine.loading.huggingface import read_hf_directory
    from engine.loading.model_file import no_progress
    from engine.loading.tokenizer import Tokenizer
    from tests.tiny_models import PROMPT, save_tiny_model
    from workbench.quality.export_hf import export_hf_directory

    reference = save_tiny_model(tmp_path / "original", architecture, num_kv_heads=2, tie=True)
    # The tiny checkpoints have no tokenizer; an export needs one (any: only the weights are compared).
    words = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(96)}, unk_token="w0"))
    tokenizer = Tokenizer(words, bos_token_id=1, eos_token_ids=(2,), add_bos_token=True, chat_template=None)
    source = dataclasses.replace(read_hf_directory(tmp_path / "original", no_progress), tokenizer=tokenizer)
    directory = export_hf_directory(source, tmp_path / "exported", dtype="float32")
    # The export states an end-of-sequence id (the tokenizer's where the config has none).
    read_back = read_hf_directory(directory, no_progress).config
    assert dataclasses.replace(read_back, eos_token_ids=source.config.eos_token_ids) == source.config
    exported = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    assert type(exported) is type(reference)
    with torch.no_grad():
        expected = reference(torch.tensor([PROMPT])).logits
        assert (exported(torch.tensor([PROMPT])).logits - expected).abs().max().item() < 1e-5
