"""The GGUF loader on tiny files of each layout llama.cpp writes beyond the bundled models': Llama
(plain, with Llama 3's RoPE scaling as the rope_freqs tensor, with linear scaling) and Qwen3 (q/k
norms): the engine's logits equal transformers' on the model the file was written from."""

from __future__ import annotations

import pytest
import torch

from engine.errors import ModelLoadError
from engine.loading.gguf import read_gguf
from engine.loading.model_file import no_progress
from tests.tiny_gguf import save_tiny_gguf
from tests.tiny_models import PROMPT, engine_logits, save_tiny_model, tiny_engine


@pytest.mark.parametrize(
    "architecture, gguf_architecture, rope_scaling",
    [
        ("llama", "llama", "none"),
        ("llama3-rope", "llama", "none"),  # Llama 3's scaling is the rope_freqs tensor, not a type
        ("llama-linear-rope", "llama", "linear"),
        ("qwen3", "qwen3", "none"),
    ],
)
def test_logits_match_transformers(tmp_path, architecture, gguf_architecture, rope_scaling):
    reference = save_tiny_model(tmp_path, architecture, num_kv_heads=2)
    file = tmp_path / "tiny.gguf"
    save_tiny_gguf(file, reference, gguf_architecture, rope_scaling)
    source = read_gguf(file, no_progress)
    assert bool(source.config.rope_frequency_divisors) == (architecture != "llama" and "rope" in architecture)
    engine = tiny_engine(file, max_num_batched_tokens=5, long_prompt_threshold=0)

    logits, generated = engine_logits(engine, PROMPT)

    with torch.no_grad():
        expected = reference(torch.tensor([PROMPT + generated])).logits[0, len(PROMPT) - 1 : -1]
    assert (logits - expected).abs().max().item() <= 1e-4


def test_an_unsupported_rope_scaling_is_refused_by_name(tmp_path):
    reference = save_tiny_model(tmp_path, "llama", num_kv_heads=2)
    file = tmp_path / "yarn.gguf"
    save_tiny_gguf(file, reference, "llama", rope_scaling="yarn")
    with pytest.raises(
        ModelLoadError, match=r"llama.rope.scaling.type is 'yarn'; supported: 'none', 'linear'"
    ) as error:
        read_gguf(file, no_progress)
    assert str(file) in str(error.value)
