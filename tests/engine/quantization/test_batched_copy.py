"""The batched bf16 copy (EngineConfig.batched_bf16_copy): it holds the weights the packed kernel
applies, steps of BATCHED_ROWS rows or more multiply by it and smaller ones by the kernel, it
costs exactly 2 bytes per copied weight, and methods it does not help refuse it."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional

from engine import ConfigError
from engine.quantization import BATCHED_ROWS, batched_copy_bytes
from engine.quantization.int4 import Int4Linear
from engine.quantization.int8 import Int8Linear
from kernels.quant import dequantize_int4, quantize_int4
from tests.tiny_models import tiny_engine


def layers(seed: int = 0):
    weight = torch.randn(96, 64, generator=torch.Generator().manual_seed(seed))
    return {"int4": Int4Linear(weight, None, 32), "int8": Int8Linear(weight, None)}, weight


@pytest.mark.parametrize("method", ["int4", "int8"])
def test_the_copy_holds_the_kernels_weights_and_serves_steps_from_batched_rows_on(method):
    with_copy, weight = layers()
    layer = with_copy[method]
    packed_only = layers()[0][method]
    layer.keep_batched_copy()
    assert layer.batched_weight.dtype == torch.bfloat16 and layer.batched_weight.shape == (96, 64)
    if method == "int4":  # the file's own 16 levels per group, rounded to bf16
        expected = dequantize_int4(*quantize_int4(weight, 32), 32)
        torch.testing.assert_close(
            layer.batched_weight.float(), expected, rtol=2**-8, atol=2**-8 * expected.abs().max().item()
        )
    inputs = torch.randn(BATCHED_ROWS + 3, 64, generator=torch.Generator().manual_seed(1))
    for rows in range(1, BATCHED_ROWS + 3):
        x = inputs[:rows]
        with torch.inference_mode():
            got, kernel = layer(x), packed_only(x)
        if rows < BATCHED_ROWS:
            assert torch.equal(got, kernel), rows
        else:
            assert torch.equal(got, functional.linear(x.bfloat16(), layer.batched_weight).float()), rows
            torch.testing.assert_close(got, kernel, rtol=0.02, atol=0.02 * kernel.abs().max().item())


def test_the_copy_costs_two_bytes_per_copied_weight_and_w8a8_refuses_it(tiny_llama):
    directory, _ = tiny_llama  # hidden 48: int8 (int4's groups of 32 do not divide it)
    packed = tiny_engine(directory, quantization="int8", quantize_lm_head=True)
    copied = tiny_engine(directory, quantization="int8", quantize_lm_head=True, batched_bf16_copy=True)
    assert copied.weight_bytes - packed.weight_bytes == batched_copy_bytes(copied.model_config, True)
    assert copied.quantization == f"int8 + int8 head, bf16 copy from {BATCHED_ROWS} rows"
    # What the memory tab adds up: each format's bytes, the copy, and what stayed float32.
    assert set(copied.weight_parts) == {"int8 (weights and scales)", "bf16 batched copy", "float32 unquantized"}
    assert sum(copied.weight_parts.values()) == copied.weight_bytes
    assert copied.weight_parts["bf16 batched copy"] == batched_copy_bytes(copied.model_config, True)
    assert copied.weight_parts["int8 (weights and scales)"] == packed.weight_parts["int8 (weights and scales)"]
    prompts = [[5, 9, 2, 40, 7, 3, 3, 8, 1, 2]] * 3  # prefills of 10 rows run on the copy
    assert len(copied.generate(prompts)[0].token_ids) > 0
    with pytest.raises(ConfigError, match="batched_bf16_copy: only with int4 or int8 on the CPU, not w8a8"):
        tiny_engine(directory, quantization="w8a8", batched_bf16_copy=True)
