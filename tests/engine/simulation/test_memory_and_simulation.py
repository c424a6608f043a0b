"""The memory model's figures, and the simulated executor: same scheduler, cost-model time."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.soak import soak
from engine import ConfigError, EngineConfig, LLMEngine
from engine.configuration.memory import concurrency_lines, params_only_line, weight_bytes_estimate
from engine.simulation.catalogue import hardware_profile, model_names, model_shape
from engine.simulation.cost_model import CostModel, StepShape
from engine.simulation.executor import SimulatedClock, SimulatedExecutor
from tests.tiny_models import tiny_engine
from workbench.backends.local import LocalBackend
from workbench.runs.runner import ScenarioRunner
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import Scenario


def test_the_mission_worked_number():
    line = params_only_line(7e9, 16)
    assert line.bytes == 14_000_000_000
    assert "7.0 × 10⁹ params × 2 bytes = 14.0 GB (before KV cache and runtime overhead)" == line.arithmetic


def test_kv_bytes_per_token():
    llama, _ = model_shape("llama-2-7b")
    assert llama.kv_bytes_per_token(2) == 512 * 1024  # 2 x 32 layers x 32 heads x 128 dims x 2 bytes
    smollm, _ = model_shape("smollm2-135m")
    assert smollm.kv_bytes_per_token(2) == 2 * 30 * 3 * 64 * 2 == 23_040


def test_catalogue_covers_the_required_shapes_and_gpus():
    assert {
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "llama-3-8b",
        "llama-3-70b",
        "mistral-7b",
        "qwen2.5-0.5b",
        "qwen2.5-7b",
        "smollm2-135m",
        "smollm2-360m",
        "smollm2-1.7b",
    } <= set(model_names())
    for gpu in ("h100-80gb", "h200", "a100-40gb", "a100-80gb", "l4", "rtx-4090"):
        assert hardware_profile(gpu).source
    assert model_shape("llama-3-8b")[0].num_parameters == pytest.approx(8.03e9, rel=0.01)
    with pytest.raises(ConfigError, match="unknown hardware 'tpu-v9'; known hardware: .*h100-80gb"):
        hardware_profile("tpu-v9")
    with pytest.raises(ConfigError, match="unknown model 'gpt-5'; known models: .*llama-2-7b"):
        model_shape("gpt-5")


def test_concurrent_4k_chats_on_an_h100():
    llama, _ = model_shape("llama-2-7b")
    lines, fits = concurrency_lines(llama, 80e9, 16, 2, 4096, 2048, 256)
    weights = 6_738_415_616 * 2  # parameters x 2 bytes
    activations = 2048 * (4 * 4096 + 2 * 32 * 128 + 3 * 11008) * 2 + 256 * 32000 * 4  # one layer live, fp32 logits
    overhead = 4_000_000_000  # 5% of 80 GB
    assert [line.bytes for line in lines] == [
        weights,
        activations,
        overhead,
        80_000_000_000 - weights - activations - overhead,
    ]
    assert fits == 28  # 62.25 GB / (512 KiB x 4,096 tokens = 2.147 GB) = 28.99


def test_estimates_agree_with_a_loaded_models_bytes(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory)  # float32
    assert weight_bytes_estimate(engine.model_config, 32) == pytest.approx(engine.weight_bytes, rel=0.02)
    kv_estimate = engine.num_kv_blocks * engine.config.block_size * engine.model_config.kv_bytes_per_token(4)
    assert kv_estimate == pytest.approx(engine.kv_cache_bytes, rel=0.01)


def test_a_soak_with_random_aborts_loses_no_request():
    """benchmarks.soak's run on fewer requests (its 10,000-request run and its wall time are a benchmark)."""
    outcome = soak(num_requests=2_000, abort_probability=0.2, seed=1)
    assert outcome["sent"] == outcome["ended"] == 2_000
    assert outcome["lost"] == outcome["ended_twice"] == outcome["blocks_in_use_at_end"] == 0
    assert outcome["finish_reasons"]["abort"] > 50 and outcome["finish_reasons"]["length"] > 1_000
    assert outcome["simulated_s"] > 2_000 / 60 * 0.8  # simulated seconds: about 2,000 / 60 req/s of arrivals


def test_impossible_simulations_are_refused_with_numbers():
    with pytest.raises(ConfigError, match=r"llama-2-70b weights need 138.0 GB at 16 bits but a100-40gb has 40.0 GB"):
        LLMEngine(EngineConfig(model="simulated:llama-2-70b@a100-40gb"))
    with pytest.raises(ConfigError, match=r"one 4,096-token request needs 2.15 GB of KV cache"):
        LLMEngine(EngineConfig(model="simulated:llama-2-7b@l4", kv_cache_memory=1 << 30))
    with pytest.raises(ConfigError, match="expected 'simulated:MODEL@HARDWARE'"):
        LLMEngine(EngineConfig(model="simulated:llama-2-7b"))


def test_same_step_times_same_scheduling_decisions(tiny_llama):
    """The real engine, its clock charged by the cost model, and the simulated engine make the
    same decisions step for step: the scheduling code is shared, not copied."""
    directory, _ = tiny_llama
    settings = dict(num_kv_blocks=40, block_size=4, max_num_batched_tokens=48, max_num_seqs=8, long_prompt_threshold=32)
    real = tiny_engine(directory, **settings)
    hardware = hardware_profile("l4")
    cost = CostModel(real.model_config, hardware, real.weight_bytes, real.kv_bytes_per_token)
    clock = SimulatedClock()
    real.clock, real.sleep = clock, clock.advance
    execute = real.executor.execute

    def charged(batch):
        clock.advance(cost.step_time(StepShape.of(batch)))
        return execute(batch)

    real.executor.execute = charged
    simulated = tiny_engine(directory, **settings)
    simulated.clock = SimulatedClock()
    simulated.sleep = simulated.clock.advance
    simulated.executor = SimulatedExecutor(cost, simulated.clock, kv_cache_bytes=real.kv_cache_bytes)

    traffic = TrafficProfile(
        arrival="gamma",
        rate=300.0,
        burstiness=0.5,
        num_requests=40,
        prompt_len=LengthDistribution(kind="uniform", low=2, high=60),
        output_len=LengthDistribution(kind="uniform", low=1, high=12),
    )

    def decisions(engine):
        steps = []
        ScenarioRunner(
            LocalBackend(engine),
            Scenario(name="same", traffic=traffic, seed=4),
            on_step=lambda step: steps.append(
                (
                    sorted(step.scheduled.items()),
                    step.stats.kv_blocks_used,
                    step.stats.num_waiting_long,
                    step.stats.preemptions_total,
                )
            ),
        ).run()
        return steps

    real_steps, simulated_steps = decisions(real), decisions(simulated)
    assert real_steps == simulated_steps
    assert real_steps[-1][3] > 0  # the small cache forced preemptions, decided the same way


def test_cost_model_decode_is_bandwidth_bound_and_prefill_compute_bound():
    llama, _ = model_shape("llama-2-7b")
    model = CostModel(
        llama, hardware_profile("h100-80gb"), weight_bytes_estimate(llama, 16), llama.kv_bytes_per_token(2)
    )

    def decode(batch):
        return model.step_time(StepShape(tuple((1, 512, True) for _ in range(batch))))

    def prefill(tokens):
        return model.step_time(StepShape(((tokens, tokens, True),)))

    assert decode(32) / decode(1) < 2.0  # 32x the work, far less than 32x the time
    assert prefill(8192) / prefill(4096) == pytest.approx(2.0, rel=0.15)  # linear once compute-bound


def test_cost_model_decode_reads_each_sequences_context_and_counts_its_attention():
    """A decode over a long context moves its K/V and does its QK^T and PV: time, bytes and FLOPs
    all grow with the context, by the formulas in the module's docstring."""
    llama, _ = model_shape("llama-2-7b")
    per_token = llama.kv_bytes_per_token(2)
    model = CostModel(llama, hardware_profile("h100-80gb"), weight_bytes_estimate(llama, 16), per_token)
    short, long = StepShape(((1, 512, True),) * 8), StepShape(((1, 32_768, True),) * 8)
    assert model.kv_bytes(long) == 8 * 32_768 * per_token and model.kv_bytes(short) == 8 * 512 * per_token
    attention = 4 * llama.num_layers * llama.num_heads * llama.head_dim * (32_768 - 512) * 8
    assert model.flops(long) - model.flops(short) == attention
    assert model.step_time(long) > 2 * model.step_time(short)
    no_sampling = StepShape(((1, 512, False),) * 8)
    assert model.flops(short) - model.flops(no_sampling) == 8 * 2 * llama.vocab_size * llama.hidden_size


def test_cost_model_flops_are_the_operators_and_the_dense_bytes_leave_out_the_tables():
    """FLOPs = 2 x projection params x tokens + causal attention + the LM head of sampling rows;
    the dense products stream the weights less one embedding table when tied, two when not.
    (Each operator's time by hand: tests/engine/simulation/test_step_cost_by_hand.py.)"""
    llama, _ = model_shape("llama-2-7b")
    hardware = hardware_profile("h100-80gb")
    weights = weight_bytes_estimate(llama, 16)
    model = CostModel(llama, hardware, weights, llama.kv_bytes_per_token(2))
    per_weight = weights / llama.num_parameters
    table = llama.vocab_size * llama.hidden_size
    assert model.dense_weight_bytes == pytest.approx(weights - 2 * table * per_weight)  # untied
    tied = dataclasses.replace(llama, tie_word_embeddings=True)
    assert CostModel(tied, hardware, weights, 1).dense_weight_bytes == pytest.approx(
        weights - table * weights / tied.num_parameters
    )
    for shape in (StepShape(((1, 700, True),) * 3), StepShape(((2048, 2048, True), (1, 90, False)))):
        tokens = sum(new for new, _, _ in shape.sequences)
        attention = sum(
            4 * llama.num_layers * llama.num_heads * llama.head_dim * (new * (context - new) + new * (new + 1) // 2)
            for new, context, _ in shape.sequences
        )
        head = 2 * table * sum(samples for _, _, samples in shape.sequences)
        assert model.flops(shape) == pytest.approx(2 * llama.num_projection_parameters * tokens + attention + head)


def test_a_simulated_gpu_counts_an_int8_kv_cache_with_its_scales():
    """Llama-3-8B on an H100: an int8 cache's token is 1 byte a value and a 2-byte scale a row
    (head_dim 128: 130 / 256 of a 16-bit token), so the same memory holds 1.97x the tokens and a
    decode step reads that much less K/V; a float32 cache holds half."""

    def engine(kv: str) -> LLMEngine:
        return LLMEngine(EngineConfig(model="simulated:llama-3-8b@h100-80gb", kv_cache_dtype=kv))

    auto, int8, float32 = engine("auto"), engine("int8"), engine("float32")
    assert int8.kv_bytes_per_token == auto.kv_bytes_per_token * 130 // 256
    assert int8.kv_capacity_tokens / auto.kv_capacity_tokens == pytest.approx(256 / 130, rel=0.01)
    assert float32.kv_capacity_tokens / auto.kv_capacity_tokens == pytest.approx(0.5, rel=0.01)
    shape = StepShape(((1, 4000, True),) * 32)
    assert int8.executor.cost_model.kv_bytes(shape) == pytest.approx(
        auto.executor.cost_model.kv_bytes(shape) * 130 / 256
    )
