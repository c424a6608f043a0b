"""On both bundled models, greedy decoding through the CPU attention operator (which reads the
paged cache in place, sixteen positions at a time on AVX-512) gives the same tokens as the torch
path that gathers each sequence's blocks and calls PyTorch's attention: with a float32 cache and
with the bfloat16 one quantized engines keep (issue 61: the operator was rewritten for speed; its
output must not move a token)."""

from __future__ import annotations

import pytest

from kernels import cpu_operators
from tests.engine.parity_prompts import greedy_tokens

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kv_cache_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_the_operator_decodes_the_tokens_the_gathering_path_does(
    model, kv_cache_dtype, make_smollm_engine, make_gemma_engine, monkeypatch
):
    assert cpu_operators.available(), cpu_operators.unavailable_reason()
    make = make_smollm_engine if model == "smollm2-135m" else make_gemma_engine
    settings = dict(kv_cache_dtype=kv_cache_dtype, compile_decode="off")
    through_the_operator = greedy_tokens(make(**settings))
    monkeypatch.setattr(cpu_operators, "available", lambda on_wait=None: False)
    assert greedy_tokens(make(**settings)) == through_the_operator
