"""The prompts the parity tests decode greedily: a fact, code, a chat turn and a long repeated
passage (a prefill of over 100 tokens, so that decode reads several blocks)."""

from __future__ import annotations

from engine import SamplingParams

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nWhat is a KV cache?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a village by the sea, there lived an old fisherman who " * 6,
]


def greedy_tokens(engine) -> list[list[int]]:
    """32 greedy tokens for each prompt, the four decoded together."""
    prompts = [engine.tokenizer.encode(text) for text in PROMPTS]
    outputs = engine.generate(prompts, SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True))
    return [output.token_ids for output in outputs]
