"""On both bundled models, greedy decoding through the CPU attention operator (which reads the
paged cache in place, sixteen positions at a time on AVX-512) gives the same tokens as the torch
path that gathers each sequence's blocks and calls PyTorch's attention: with a float32 cache and
with the bfloat16 one quantized engines keep (issue 61: the operator was rewritten for speed; its
output must not move a token)."""

from __future__ import annotations

import pytest

from engine import SamplingParams
from kernels import cpu_paged_attention

pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nWhat is a KV cache?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a village by the sea, there lived an old fisherman who " * 6,
]


def greedy_tokens(engine) -> list[list[int]]:
    prompts = [engine.tokenizer.encode(text) for text in PROMPTS]
    outputs = engine.generate(prompts, SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True))
    return [output.token_ids for output in outputs]


@pytest.mark.parametrize("kv_cache_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_the_operator_decodes_the_tokens_the_gathering_path_does(
    model, kv_cache_dtype, make_smollm_engine, make_gemma_engine, monkeypatch
):
    assert cpu_paged_attention.available(), cpu_paged_attention.unavailable_reason()
    make = make_smollm_engine if model == "smollm2-135m" else make_gemma_engine
    settings = dict(kv_cache_dtype=kv_cache_dtype, compile_decode="off")
    through_the_operator = greedy_tokens(make(**settings))
    monkeypatch.setattr(cpu_paged_attention, "available", lambda on_wait=None: False)
    assert greedy_tokens(make(**settings)) == through_the_operator
