"""quantization = "auto", the default: a model file runs in its own precision where a method
reproduces it, and the engine, the run's provenance and the window say what runs and why."""

from __future__ import annotations

import pytest
import torch

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.quantization.auto import choose_quantization
from engine.quantization.cpu_products import COPY_PAYS_FROM, CopyTiming, cpu_features, time_batched_copy
from workbench.machine.provenance import environment


def timed(speedup: float):
    """A copy timing with this speedup, in place of timing one on this machine."""
    return lambda method, *_: CopyTiming(method, 64, packed_seconds=speedup * 1e-3, bf16_seconds=1e-3)


@pytest.mark.parametrize(
    "projections, head, expected",
    [
        ("Q4_1", "Q8_0", ("int4", 32, True)),  # the bundled SmolLM2 file
        ("Q4_1", "F16", ("int4", 32, False)),  # a float head stays float
        ("Q8_0", "Q8_0", ("int8", 32, True)),
        ("Q4_K", "Q6_K", ("none", 64, False)),  # no method here reproduces K-quants: run them dequantized
        ("F16", "F16", ("none", 64, False)),
        (None, None, ("none", 64, False)),  # safetensors
    ],
)
def test_each_file_type_gets_the_method_that_reproduces_it(projections, head, expected, smollm_source):
    choice = choose_quantization(projections, head, 64, smollm_source.config, "cuda", 80 << 30)
    assert (choice.method, choice.group_size, choice.quantize_lm_head) == expected
    assert choice.reason.startswith("auto: ") and (projections or "float weights") in choice.reason
    assert not choice.batched_copy  # CUDA runs the Triton kernels at every batch size
    assert choice.kv_cache_dtype == "auto"  # there the cache holds the compute dtype (bf16)


@pytest.mark.parametrize(
    "projections, device, memory_gb, copy",
    [
        ("Q4_1", "cpu", 24, True),
        ("Q8_0", "cpu", 24, True),
        ("Q4_1", "cpu", 1, False),  # SmolLM2's copy (269 MB) would take more than a quarter of 1 GB
        ("F16", "cpu", 24, False),  # float weights run as stored: no quantized layer to copy
    ],
)
def test_on_the_cpu_a_batched_copy_is_kept_when_it_takes_at_most_a_quarter_of_memory(
    projections, device, memory_gb, copy, smollm_source
):
    choice = choose_quantization(
        projections, "Q8_0", 32, smollm_source.config, device, memory_gb << 30, time_copy=timed(2.7)
    )
    assert choice.batched_copy == copy
    assert ("bf16 copy for many-row steps, 269 MB" in choice.reason) == copy
    assert ("ran 2.7x the" in choice.reason) == copy
    quantized = projections != "F16"
    assert (
        choice.kv_cache_dtype == ("bfloat16" if quantized else "auto")
        and ("K/V cached in bf16" in choice.reason) == quantized
    )


@pytest.mark.parametrize(
    "speedup, copy", [(0.2, False), (1.0, False), (COPY_PAYS_FROM - 0.01, False), (COPY_PAYS_FROM, True), (2.7, True)]
)
def test_a_batched_copy_is_kept_only_where_it_was_timed_clearly_faster(speedup, copy, smollm_source):
    # 0.2: the int4 kernel against bf16 with oneDNN held to AVX2 (no native bf16) on the development CPU.
    timings = []

    def time_copy(*shape):
        timings.append(shape)
        return timed(speedup)(*shape)

    choice = choose_quantization("Q4_1", "Q8_0", 32, smollm_source.config, "cpu", 24 << 30, time_copy=time_copy)
    config = smollm_source.config
    assert timings == [("int4", 32, config.hidden_size, config.intermediate_size)]  # the gate projection's shape
    assert choice.batched_copy == copy
    described = f"a 64-row bf16 product ran {speedup:.1f}x the int4 kernel's speed on this CPU"
    assert described in choice.reason and ("; no bf16 copy (" in choice.reason) != copy


def test_a_copy_is_timed_only_where_it_could_be_kept(smollm_source):
    def refuse(*_):
        raise AssertionError("timed a copy that could not be kept")

    for projections, device, memory in (("Q4_1", "cuda", 80 << 30), ("Q4_1", "cpu", 1 << 30), ("F16", "cpu", 24 << 30)):
        choice = choose_quantization(projections, "Q8_0", 32, smollm_source.config, device, memory, time_copy=refuse)
        assert not choice.batched_copy and "bf16 copy" not in choice.reason


def test_a_copy_timing_runs_both_paths_of_a_real_layer():
    timing = time_batched_copy("int8", 32, 256, 512)
    assert timing.method == "int8" and timing.rows == 64
    assert 0 < timing.packed_seconds < 1 and 0 < timing.bf16_seconds < 1
    assert timing.pays == (timing.speedup >= COPY_PAYS_FROM)
    assert cpu_features().split(";")[0] in {"DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256"}


def test_a_kv_cache_dtype_in_the_configuration_is_kept(smollm_source):
    choice = choose_quantization("Q4_1", "Q8_0", 32, smollm_source.config, "cpu", 24 << 30, kv_cache_dtype="float32")
    assert choice.kv_cache_dtype == "float32" and "K/V" not in choice.reason


def test_the_bundled_q4_1_file_runs_as_int4_g32_with_an_int8_head_by_default(smollm_source):
    engine = LLMEngine(EngineConfig(device="cpu", kv_cache_memory=32 << 20), source=smollm_source)
    config = engine.config
    assert (config.quantization, config.group_size, config.quantize_lm_head) == ("int4", 32, True)
    assert config.kv_cache_dtype == "bfloat16" and engine.kv_dtype == torch.bfloat16 and engine.dtype == torch.float32
    # Whether the bf16 copy is kept was timed on this CPU (kept on the development EPYC, which has AVX-512 BF16).
    with_copy = "int4 g32 + int8 head, bf16 copy from 8 rows"
    assert engine.quantization == (with_copy if config.batched_bf16_copy else "int4 g32 + int8 head")
    kept = "; a bf16 copy for many-row steps, 269 MB" if config.batched_bf16_copy else "; no bf16 copy (a 64-row"
    assert engine.quantization_choice.startswith(
        "auto: Q4_1 projections -> int4 g32 + int8 head (the file stores its head as Q8_0)" + kept
    )
    assert engine.quantization_choice.endswith("; K/V cached in bf16")
    versions = environment(engine)
    assert versions["quantization"] == engine.quantization and versions["quantization_choice"].startswith("auto: Q4_1")
    assert versions["kv_cache_dtype"] == "bfloat16" and versions["dtype"] == "float32"
    assert versions["cpu_features"] == cpu_features()
    greedy = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    reference = LLMEngine(
        EngineConfig(device="cpu", kv_cache_memory=32 << 20, quantization="none"), source=smollm_source
    )
    prompt = engine.tokenizer.encode("The capital of France is")
    assert engine.generate([prompt], greedy)[0].token_ids[:4] == reference.generate([prompt], greedy)[0].token_ids[:4]


def test_a_quantization_in_the_configuration_is_kept(smollm_source):
    engine = LLMEngine(EngineConfig(device="cpu", kv_cache_memory=32 << 20, quantization="none"), source=smollm_source)
    assert engine.quantization == "none" and engine.quantization_choice == "chosen in the configuration"


def test_a_float_model_and_a_simulated_one_run_unquantized(tiny_llama):
    directory, _ = tiny_llama
    tiny = LLMEngine(EngineConfig(model=str(directory), device="cpu", num_kv_blocks=16, block_size=4))
    assert tiny.quantization == "none" and tiny.quantization_choice == "auto: float weights run as stored, unquantized"
    simulated = LLMEngine(EngineConfig(model="simulated:llama-2-7b@h100-80gb"))
    assert simulated.quantization == "none" and "simulated" in simulated.quantization_choice
