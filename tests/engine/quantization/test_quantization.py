"""Quantized engines: real low-bit tensors, honest byte counts, fluent output, clear refusals."""

from __future__ import annotations

import pytest
import torch

from engine import ConfigError, SamplingParams
from engine.quantization.int4 import Int4Linear
from engine.quantization.int8 import Int8Linear
from engine.quantization.w8a8 import W8A8Linear
from tests.tiny_models import tiny_engine

pytestmark = pytest.mark.slow

PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nName three colours of the rainbow.<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.mark.parametrize("method", ["int8", "int4", "w4a8", "w8a8", "bnb-int8", "bnb-nf4"])
def test_quantized_models_stay_fluent_and_agree_with_none_at_first(make_smollm_engine, method):
    reference = make_smollm_engine(kv_cache_memory=32 << 20)
    quantized = make_smollm_engine(kv_cache_memory=32 << 20, quantization=method)
    params = SamplingParams(max_tokens=24, temperature=0.0)
    for prompt, expected, actual in zip(
        PROMPTS, reference.generate(PROMPTS, params), quantized.generate(PROMPTS, params)
    ):
        words = actual.text.split()
        assert len(words) >= 3 and sum(word.strip(".,!?:;()").isalnum() for word in words) / len(words) > 0.8, (
            actual.text
        )
        # The unquantized model's first three tokens stay among the quantized one's two most likely.
        # Not equality: w8a8 flips close calls (top-1 agreement 95.6% in workbench quality); before
        # smoothing it answered "1. Red" as "The rainbow is made up of three colours: ...".
        prompt_ids = quantized.tokenizer.encode(prompt)
        logits = quantized.executor.sequence_logits(prompt_ids + expected.token_ids[:3], quantized.config.block_size)
        top_two = logits[len(prompt_ids) - 1 : len(prompt_ids) + 2].topk(2).indices.tolist()
        assert all(token in pair for token, pair in zip(expected.token_ids[:3], top_two)), (method, actual.text)
    assert quantized.weight_bytes < 0.5 * reference.weight_bytes


def test_int4_holds_packed_bytes_and_reports_them(make_smollm_engine):
    engine = make_smollm_engine(kv_cache_memory=32 << 20, quantization="int4", group_size=32)
    projection = engine.executor.model.model.layers[0].mlp.down_proj
    assert isinstance(projection, Int4Linear) and projection.qweight.dtype == torch.uint8
    assert projection.qweight.numel() == 576 * 1536 // 2  # two weights per byte
    config = engine.model_config
    projections = config.num_layers * (
        2 * config.hidden_size**2
        + 2 * config.hidden_size * config.num_kv_heads * config.head_dim
        + 3 * config.hidden_size * config.intermediate_size
    )
    packed_and_groups = projections // 2 + projections // 32 * 2 * 2  # bytes + bf16 scale and zero per group
    rest = engine.unquantized_weight_bytes - projections * 4  # embeddings and norms stay float32
    assert engine.weight_bytes == packed_and_groups + rest


def test_impossible_quantization_is_refused_with_the_layer_and_a_choice(tiny_llama):
    directory, _ = tiny_llama  # hidden 48: group 32 does not divide it
    with pytest.raises(
        ConfigError, match="group_size: 32 does not divide q/k/v/gate/up_proj's input width 48; choose int8 instead"
    ):
        tiny_engine(directory, quantization="int4", group_size=32)
    with pytest.raises(ConfigError, match="group_size: int4 supports 32, 64, 128, got 48"):
        tiny_engine(directory, quantization="int4", group_size=48)
    with pytest.raises(ConfigError, match="quantization: expected one of none, int8"):
        tiny_engine(directory, quantization="int2")


@pytest.mark.parametrize("method", ["int8", "w8a8"])
def test_int8_weights_work_on_any_width_with_the_lm_head_too(tiny_llama, method):
    directory, _ = tiny_llama
    greedy = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
    engine = tiny_engine(directory, quantization=method, quantize_lm_head=True)
    output = engine.generate([[1, 2, 3, 4]], greedy)[0]
    head_in_float = tiny_engine(directory, quantization=method).generate([[1, 2, 3, 4]], greedy)[0]
    assert output.token_ids == head_in_float.token_ids and engine.executor.model.quantized_head is not None
    projection = engine.executor.model.model.layers[0].mlp.gate_up_proj
    assert (
        isinstance(projection, {"int8": Int8Linear, "w8a8": W8A8Linear}[method])
        and projection.qweight.dtype == torch.int8
    )


@pytest.mark.parametrize("method", ["int8", "w8a8"])  # int4 needs widths of 32 and up; the tiny model's is 48
def test_the_quantized_lm_head_gives_the_models_own_head_logits(tiny_llama, method):
    """On an untied model (its head is not its embedding table), the quantized head's logits are
    the unquantized head's within quantization error, far closer than the embedding table's."""
    directory, _ = tiny_llama
    reference = tiny_engine(directory).executor.model
    assert not reference.config.tie_word_embeddings
    quantized = tiny_engine(directory, quantization=method, quantize_lm_head=True).executor.model
    hidden = torch.randn(16, reference.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        expected = reference.compute_logits(hidden)
        got = quantized.compute_logits(hidden)
        from_embedding = hidden @ reference.model.embed_tokens.weight.T
    error = (got - expected).norm() / expected.norm()
    assert error < 0.05 and (from_embedding - expected).norm() / expected.norm() > 0.5


def test_the_int8_embedding_holds_a_q8_0_table_exactly():
    """A table on Q8_0's grid (int8 values, one scale per 32) is looked up exactly: the group
    scales recover the file's own; a per-row scale (the int8 head's) would not."""
    from engine.quantization.int8 import Int8Embedding

    generator = torch.Generator().manual_seed(0)
    values = torch.randint(-127, 128, (64, 96), generator=generator).float()
    values[:, ::32] = 127.0  # each block reaches the end of its range, as Q8_0's quantizer makes it
    block_scales = torch.rand(64, 3, generator=generator).half().float() * 0.01 + 1e-4
    table = (values.view(64, 3, 32) * block_scales[:, :, None]).view(64, 96)
    embedding = Int8Embedding(table, torch.float32)
    ids = torch.tensor([0, 5, 63, 5])
    assert torch.equal(embedding(ids), table[ids])
    assert embedding.scales.shape == (64, 3) and embedding.qweight.dtype == torch.int8
    per_row = Int8Embedding(table[:, :30], torch.float32)  # a width that 32 does not divide: per row
    assert per_row.scales.shape == (64, 1)
    assert (per_row(ids) - table[ids, :30]).abs().max() <= per_row.scales.max() / 2 + 1e-7


def test_w4a8_refuses_a_width_its_operator_cannot_read_naming_it():
    from types import SimpleNamespace

    from engine.quantization import check_quantization

    config = SimpleNamespace(hidden_size=96, intermediate_size=256, num_heads=3, head_dim=32)
    with pytest.raises(ConfigError, match="w4a8 needs input widths that are multiples of 64; hidden_size is 96"):
        check_quantization("w4a8", 32, config, quantize_lm_head=True)
    check_quantization(
        "w4a8", 32, SimpleNamespace(hidden_size=128, intermediate_size=256, num_heads=4, head_dim=32), True
    )
