"""The compiled decode step (EngineConfig.compile_decode) gives the eager engine's greedy tokens,
compiles only while warming up or in its background thread, keeps engines' graphs apart, and falls
back to eager when compilation fails."""

from __future__ import annotations

import resource
import time

import pytest
import torch
from torch._dynamo.utils import counters

import engine.execution.executor
from engine import SamplingParams
from tests.tiny_models import TINY_SHAPE, tiny_engine

pytestmark = pytest.mark.slow  # compiling takes tens of seconds on two cores

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
PROMPTS = [[5, 9, 2, 40, 7], [3] * 19, [11, 12], list(range(1, 38))]  # mixed lengths: masked attention


def generate_each_way(engine):
    """One request alone (batch of one), then all together (a batch of several)."""
    return [engine.generate([PROMPTS[0]], GREEDY)[0].token_ids] + [
        output.token_ids for output in engine.generate(PROMPTS, GREEDY)
    ]


def test_compiled_decode_matches_eager_without_compiling_mid_run(tiny_llama):
    directory, _ = tiny_llama
    methods = ("none", "int8", "w8a8")
    expected = {method: generate_each_way(tiny_engine(directory, quantization=method)) for method in methods}
    torch._dynamo.reset()
    compiled = {}
    for method in methods:  # both alive at once: each must keep running its own model's graphs
        graphs_before = counters["stats"]["unique_graphs"]
        compiled[method] = tiny_engine(directory, quantization=method, compile_decode="blocking")
        assert compiled[method].executor.decode_mode == "compiled"
        # The decode graph's for one sequence and for two or more; the prefill halves' (two each).
        assert counters["stats"]["unique_graphs"] == graphs_before + 4
    graphs_after_warm_up = counters["stats"]["unique_graphs"]
    for method in methods:
        assert generate_each_way(compiled[method]) == expected[method]
    assert generate_each_way(compiled["none"]) == expected["none"]  # after the quantized engines ran
    assert counters["stats"]["unique_graphs"] == graphs_after_warm_up  # no compile once serving
    assert all(engine.executor.decode_mode == "compiled" for engine in compiled.values())


def test_failed_compile_falls_back_to_eager(tiny_llama, monkeypatch):
    directory, _ = tiny_llama
    expected = generate_each_way(tiny_engine(directory))

    def broken_compile(function, **options):
        def run(*args):
            raise RuntimeError("no C++ compiler found")

        return run

    monkeypatch.setattr(engine.execution.executor.torch, "compile", broken_compile)
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler found"):
        fallen_back = tiny_engine(directory, compile_decode="blocking")
    assert fallen_back.executor.decode_mode == "eager (compile failed: RuntimeError: no C++ compiler found)"
    assert generate_each_way(fallen_back) == expected


def test_compiled_decode_gives_each_row_its_own_token_with_one_token_prompt_chunks(tiny_llama):
    """long_prompt_threshold = 1 prefills every prompt one token at a time: one-token rows that do
    not sample sit in the same batches as decodes. Each sampled token must still be its own row's."""
    directory, _ = tiny_llama
    settings = dict(long_prompt_threshold=1, max_long_prefills=2)
    prompts = [[5, 9, 2, 40, 7], [11], [3] * 7, [8, 1, 3]]
    expected = [output.token_ids for output in tiny_engine(directory, **settings).generate(prompts, GREEDY)]
    compiled = tiny_engine(directory, compile_decode="blocking", **settings)
    assert [output.token_ids for output in compiled.generate(prompts, GREEDY)] == expected


def test_a_background_compile_serves_eagerly_meanwhile_then_switches(tiny_llama, held_compile):
    """Requests run while the graph compiles in its thread, writing the same KV cache; they must
    get the eager engine's tokens before and after the switch, and record how each step ran."""
    directory, _ = tiny_llama
    expected = generate_each_way(tiny_engine(directory))
    torch._dynamo.reset()
    engine = tiny_engine(directory, compile_decode="background")
    steps = []
    outputs_while_compiling = 0
    deadline = time.monotonic() + 600
    while engine.executor.decode_mode != "compiled":
        assert engine.executor.decode_mode == "eager (compiling in the background)"
        assert time.monotonic() < deadline, "the background compile did not finish in 10 minutes"
        assert generate_each_way(engine) == expected
        outputs_while_compiling += 1
        held_compile.set()  # served eagerly at least once: let the compile run
    while engine.executor.prefill_mode != "compiled halves":  # compiled next, in the same thread
        assert time.monotonic() < deadline, "the background compile did not finish in 10 minutes"
        time.sleep(0.05)
    graphs_when_ready = counters["stats"]["unique_graphs"]
    tokens = {engine.add_request(prompt, GREEDY): [] for prompt in PROMPTS}
    while engine.has_unfinished():
        result = engine.step()
        steps.append(result.stats)
        tokens.update({output.request_id: output.token_ids for output in result.outputs if output.finished})
    assert list(tokens.values()) == expected[1:]
    assert outputs_while_compiling >= 1
    assert counters["stats"]["unique_graphs"] == graphs_when_ready  # both graphs were ready at the switch
    decode_only = [stats.decode_compiled for stats in steps if stats.prefill_tokens == 0]
    assert decode_only and all(decode_only)
    assert not any(stats.decode_compiled for stats in steps if stats.prefill_tokens)


def test_a_compiled_step_writes_the_shared_kv_tensors_in_place(tmp_path):
    """Gemma 3's layers share the pool's KV tensors across KV groups (engine/model_spec/kv_layout.py).
    Written through a view with `index_copy_`, the compiled graph could not write a tensor that six
    layers write in place, and copied each shared tensor every step: on Gemma 3 270M six fresh
    179 MB buffers, 446 ms a one-token step instead of 18.5 (docs/measurements.md). Here Gemma 3's
    pattern (five window layers to a global one) on a tiny model with 32 MiB cache tensors: the
    copies showed as 524,353 page faults in 16 decode steps, in place there is about none. The
    compiled steps must give the eager tokens too."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        **dict(TINY_SHAPE, num_hidden_layers=12),
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=5,
        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 2,
        query_pre_attn_scalar=20,
        pad_token_id=0,
    )
    transformers.Gemma3ForCausalLM(config).eval().save_pretrained(tmp_path, safe_serialization=True)
    settings = dict(num_kv_blocks=65_536)
    compiled = tiny_engine(tmp_path, compile_decode="blocking", **settings)
    assert compiled.executor.decode_mode == "compiled"
    assert len(compiled.executor.kv_pool) == 2  # groups of two layers: each tensor written by six
    cache_pages = compiled.executor.kv_pool[0][0].nbytes // resource.getpagesize()
    compiled.generate([[5, 9, 2, 40, 7]], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    greedy = SamplingParams(max_tokens=17, temperature=0.0, ignore_eos=True)
    tokens = compiled.generate([[5, 9, 2, 40, 8]], greedy)[0].token_ids
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    assert faults < cache_pages, f"16 decode steps touched {faults:,} new pages; one cache tensor is {cache_pages:,}"
    assert tokens == tiny_engine(tmp_path, **settings).generate([[5, 9, 2, 40, 8]], greedy)[0].token_ids
