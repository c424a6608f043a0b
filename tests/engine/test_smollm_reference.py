"""On the bundled SmolLM2-135M GGUF: the engine's greedy continuation equals transformers' (loaded
from the same file) token for token, and its tokenizer agrees with transformers' where both follow
the file."""

from __future__ import annotations

import pytest
import torch

from engine import SamplingParams
from tests.engine.transformers_reference import transformers_reference

pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nWhat is a KV cache?<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def transformers_smollm():
    return transformers_reference("smollm2-135m")


def test_greedy_continuation_matches_transformers(make_smollm_engine, transformers_smollm):
    model, _ = transformers_smollm
    engine = make_smollm_engine()
    prompts = [engine.tokenizer.encode(text) for text in PROMPTS]
    outputs = engine.generate(prompts, SamplingParams(max_tokens=32, temperature=0.0))
    for prompt, output in zip(prompts, outputs):
        with torch.no_grad():
            expected = model.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False)
        assert output.token_ids == expected[0, len(prompt) :].tolist(), engine.tokenizer.decode(prompt)


def test_tokenizer_matches_transformers_on_text_without_digits(make_smollm_engine, transformers_smollm):
    _, reference = transformers_smollm
    tokenizer = make_smollm_engine().tokenizer
    text = "Hello world! Continuous batching keeps the GPU busy.\n\n  Indented line, émigré café."
    assert tokenizer.encode(text) == reference(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_tokenizer_splits_digits_like_smollm2(make_smollm_engine):
    # SmolLM2's own tokenizer (and llama.cpp's "smollm" pre-tokenizer) give every digit its own
    # token; transformers' GGUF conversion does not, which is why this case is checked apart.
    tokenizer = make_smollm_engine().tokenizer
    ids = tokenizer.encode("2024")
    assert [tokenizer.decode([token]) for token in ids] == ["2", "0", "2", "4"]


def test_special_tokens_and_chat_template(make_smollm_engine):
    tokenizer = make_smollm_engine().tokenizer
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert prompt.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nHi<|im_end|>" in prompt
    ids = tokenizer.encode("<|im_start|>user")
    assert ids[0] == tokenizer.backend.token_to_id("<|im_start|>")
