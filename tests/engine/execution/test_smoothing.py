"""SmoothQuant for w8a8 (engine.smoothing): the rescaled model computes the same function, and
its int8 activations lose less than unsmoothed ones."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine.execution.smoothing import smooth_for_w8a8
from engine.loading.sharegpt import load_sharegpt
from engine.quantization import quantize_model
from tests.tiny_models import tiny_engine

PROMPT = [5, 17, 3, 60, 22, 8, 41, 9, 77, 2, 31, 64]


def test_smoothing_keeps_the_function_head_included(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, quantization="none")
    model = engine.executor.model
    before = engine.executor.sequence_logits(PROMPT, engine.config.block_size)
    norm_gain = model.model.layers[0].input_layernorm.weight.clone()
    smoothing, head_weight = smooth_for_w8a8(model, tokenizer=None, smooth_head=True)
    assert smoothing.calibration_source.startswith("seeded random token ids")
    assert not torch.equal(model.model.layers[0].input_layernorm.weight, norm_gain)  # it did rescale
    model.quantized_head = nn.Linear(head_weight.shape[1], head_weight.shape[0], bias=False)
    model.quantized_head.weight = nn.Parameter(head_weight, requires_grad=False)
    after = engine.executor.sequence_logits(PROMPT, engine.config.block_size)
    assert torch.allclose(after, before, rtol=1e-4, atol=1e-4)
    # The embedding table, tied to the head, keeps its values for the token lookup.
    assert not torch.equal(head_weight, model.model.embed_tokens.weight)


@pytest.mark.slow
def test_smoothing_halves_what_int8_activations_cost(make_smollm_engine, smollm_source):
    norm_gain = smollm_source.tensors["model.layers.0.input_layernorm.weight"].clone()
    reference = make_smollm_engine(kv_cache_memory=32 << 20)
    tokenizer, block_size = reference.tokenizer, reference.config.block_size
    replies = [tokenizer.encode(conversation.reply)[:256] for conversation in load_sharegpt().conversations[-40:-37]]
    expected = [torch.log_softmax(reference.executor.sequence_logits(ids, block_size), -1) for ids in replies]

    def kl_after_w8a8(smooth: bool) -> float:
        engine = make_smollm_engine(kv_cache_memory=32 << 20)  # unquantized, then quantized in place
        if smooth:
            smooth_for_w8a8(engine.executor.model, tokenizer, smooth_head=False)
        quantize_model(engine.executor.model, "w8a8", 32, False, progress=lambda *_: None)
        actual = [torch.log_softmax(engine.executor.sequence_logits(ids, block_size), -1) for ids in replies]
        return sum((base.exp() * (base - out)).sum().item() for base, out in zip(expected, actual)) / sum(
            map(len, replies)
        )

    unsmoothed, smoothed = kl_after_w8a8(False), kl_after_w8a8(True)
    assert smoothed < 0.5 * unsmoothed, (smoothed, unsmoothed)
    # Engines share the source's tensors: smoothing one must not rescale the others.
    assert torch.equal(smollm_source.tensors["model.layers.0.input_layernorm.weight"], norm_gain)
