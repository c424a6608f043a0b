"""The simulated step's cost, operator by operator, against hand arithmetic (issue 59): the dense
products, attention (causal for a prefill, windowed for a sliding layer), the LM head with its
logits, the embedding rows gathered, sampling; the smooth roofline; the all-reduce at a decode-
and a prefill-sized message; a serving stack's host time, its overlap and multi-step scheduling."""

from __future__ import annotations

import dataclasses

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.configuration.memory import weight_bytes_estimate
from engine.errors import ConfigError
from engine.simulation import operators
from engine.simulation.catalogue import hardware_profile, model_shape
from engine.simulation.cost_model import CostModel, StepShape
from engine.simulation.parallel import (
    Parallelism,
    all_reduce_s,
    one_shot_all_reduce_s,
    ring_all_reduce_s,
)
from engine.simulation.serving_stacks import Part, ServingStack

LLAMA_3_8B, _ = model_shape("llama-3-8b")  # 32 layers, 32 heads, 8 KV heads of 128, hidden 4096, vocab 128,256
GEMMA_3, _ = model_shape("gemma3-270m")  # sliding layers with a 512-token window


def test_the_dense_products_stream_their_weights_once_and_multiply_every_new_token():
    sequences = ((1, 500, True),) * 7 + ((300, 300, True),)
    cost = operators.dense_products(sequences, LLAMA_3_8B, dense_weight_bytes=13e9, tensor=2)
    assert cost.streamed_bytes == 13e9 / 2 and cost.gathered_bytes == 0
    assert cost.flops == 2 * LLAMA_3_8B.num_projection_parameters * 307 / 2


def test_attention_reads_each_contexts_kv_and_counts_causal_pairs():
    per_token = LLAMA_3_8B.kv_bytes_per_token(2)  # 131,072 bytes: 2 x 32 layers x 8 heads x 128 x 2
    assert per_token == 131_072
    decode = operators.attention(((1, 1000, True),), LLAMA_3_8B, per_token, kv_share=1.0, tensor=1)
    assert decode.gathered_bytes == 1000 * per_token
    assert decode.flops == 4 * 32 * 128 * 32 * 1000  # one query over 1,000 keys in 32 layers
    # A 4-token prefill after 6 cached tokens: its queries see 7, 8, 9 and 10 keys (not 10 each).
    prefill = operators.attention(((4, 10, True),), LLAMA_3_8B, per_token, kv_share=0.25, tensor=4)
    assert operators.causal_pairs(LLAMA_3_8B, 4, 10) == 32 * (7 + 8 + 9 + 10)
    assert prefill.flops == 4 * 32 * 128 * 32 * 34 / 4 and prefill.gathered_bytes == 10 * per_token * 0.25


def test_a_sliding_layer_attends_to_its_window_only():
    window, layers, sliding = GEMMA_3.sliding_window, GEMMA_3.num_layers, GEMMA_3.num_sliding_layers
    assert (window, sliding) == (512, 15) and layers == 18
    # 3 queries ending at position 1,000: 998, 999 and 1,000 keys in a full layer, 512 each in a sliding one.
    assert operators.causal_pairs(GEMMA_3, 3, 1000) == (layers - sliding) * (998 + 999 + 1000) + sliding * 3 * 512
    # A prefill of 600 from nothing: the window fills up over its first 512 queries.
    full = 600 * 601 // 2
    windowed = 512 * 513 // 2 + (600 - 512) * 512
    assert operators.causal_pairs(GEMMA_3, 600, 600) == (layers - sliding) * full + sliding * windowed


def test_the_lm_head_streams_its_slice_and_writes_float32_logits_for_the_rows_that_sample():
    sequences = ((1, 50, True), (1, 60, True), (64, 64, False))
    head = operators.lm_head(sequences, LLAMA_3_8B, bytes_per_weight=2, tensor=2)
    table = 128_256 * 4096
    assert head.streamed_bytes == (table * 2 + 2 * 128_256 * 4) / 2
    assert head.flops == 2 * table * 2 / 2
    assert operators.lm_head(((64, 64, False),), LLAMA_3_8B, 2, 1) == operators.OperatorCost("LM head", 0, 0, 0)


def test_the_embedding_gathers_rows_and_sampling_reads_the_logits():
    sequences = ((1, 50, True), (100, 100, True))
    assert operators.embedding(sequences, LLAMA_3_8B, 2).streamed_bytes == 101 * 4096 * 2
    assert operators.sampling(sequences, LLAMA_3_8B).streamed_bytes == 2 * 128_256 * 4 * operators.SAMPLING_PASSES


def test_each_operator_takes_its_smooth_roofline_and_the_step_their_sum():
    h100 = dataclasses.replace(
        hardware_profile("h100-80gb"), roofline_sharpness=2.0, step_overhead_s=0.001, sequence_overhead_s=1e-5
    )
    weights = weight_bytes_estimate(LLAMA_3_8B, 16)
    model = CostModel(LLAMA_3_8B, h100, weights, LLAMA_3_8B.kv_bytes_per_token(2))
    shape = StepShape(((1, 700, True),) * 64 + ((512, 512, True),))
    total = 0.0
    for cost in model.operators(shape):
        memory = cost.streamed_bytes / (3.35e12 * h100.bandwidth_efficiency) + cost.gathered_bytes / (
            3.35e12 * h100.kv_bandwidth_efficiency
        )
        compute = cost.flops / (989e12 * h100.compute_efficiency)
        assert model.operator_time(cost) == pytest.approx((memory**2 + compute**2) ** 0.5, rel=1e-12)
        total += model.operator_time(cost)
    assert model.step_time(shape) == pytest.approx(total + 0.001 + 65 * 1e-5, rel=1e-12)
    # The embedding's rows: 576 of them, not the 1 GB table.
    assert [cost.name for cost in model.operators(shape)][0] == "embedding"
    assert model.operators(shape)[0].streamed_bytes == pytest.approx(576 * 4096 * weights / LLAMA_3_8B.num_parameters)


def test_an_all_reduce_is_one_shot_for_a_decode_step_and_a_ring_for_a_prefill():
    link, hop = 450e9, 5e-6
    decode = 64 * 8192 * 2  # 64 tokens of 8,192 16-bit activations: 1 MiB
    assert one_shot_all_reduce_s(decode, 4, link, hop) == pytest.approx(3 * decode / link + hop)  # 12.0 us
    assert ring_all_reduce_s(decode, 4, link, hop) == pytest.approx(1.5 * decode / link + 6 * hop)  # 33.5 us
    assert all_reduce_s(decode, 4, link, hop) == pytest.approx(11.99e-6, rel=1e-3)
    prefill = 2048 * 8192 * 2  # 32 MiB
    assert all_reduce_s(prefill, 4, link, hop) == ring_all_reduce_s(prefill, 4, link, hop)
    assert all_reduce_s(prefill, 4, link, hop) == pytest.approx(141.85e-6, rel=1e-3)
    llama_70b, _ = model_shape("llama-3-70b")
    tp4 = Parallelism(tensor=4)
    assert tp4.communication_s(64, llama_70b, link, hop) == pytest.approx(2 * 80 * 11.99e-6, rel=1e-3)


def _part(value: float) -> Part:
    return Part(value, "test", (0.0, 1.0))


def test_a_stacks_parts_serial_and_overlapped_and_multi_step_scheduling():
    """By hand: a decode step of 100 rows under multi-step 10 pays a tenth of its scheduler call;
    what the stack overlaps hides behind the GPU up to the GPU's time, the rest adds."""
    stack = ServingStack(
        source="test",
        schedule_s=_part(0.004),
        schedule_per_sequence_s=_part(2e-5),
        output_s=_part(0.001),
        output_per_sequence_s=_part(3e-5),
        request_s=_part(0.003),
        launch_graph_s=_part(1e-4),
        launch_eager_per_layer_s=_part(2e-4),
        graph_max_tokens=128,
        output_overlapped=True,
    )
    decode = {"tokens": 100, "has_prefill": False, "layers": 32}
    call = (0.004 + 2e-5 * 100) / 10
    output = 0.001 + 3e-5 * 100  # overlapped: 4 ms behind a 20 ms GPU step
    assert stack.step_s(0.020, 100, 2, scheduler_steps=10, **decode) == pytest.approx(0.003 * 2 + call + 0.020)
    # A GPU faster than the overlapped output processing waits for it.
    assert stack.step_s(0.001, 100, 2, scheduler_steps=10, **decode) == pytest.approx(0.006 + call + output)
    # A step that prefills makes a scheduler call of its own, and launches its 32 layers eagerly
    # (0.2 ms each: 6.4 ms, longer than this GPU's 1 ms).
    prefill = {"tokens": 100, "has_prefill": True, "layers": 32}
    assert stack.step_s(0.001, 100, 0, scheduler_steps=10, **prefill) == pytest.approx(0.004 + 2e-5 * 100 + 32 * 2e-4)
    # Above the largest captured graph a decode launches eagerly too; a stack that overlaps its
    # scheduling hides the call as well.
    assert stack.launch_s(129, False, 32) == pytest.approx(32 * 2e-4) and stack.launch_s(128, False, 32) == 1e-4
    ahead = dataclasses.replace(stack, schedule_overlapped=True)
    assert ahead.step_s(0.020, 100, 0, scheduler_steps=1, **decode) == pytest.approx(0.020)


def test_every_catalogued_stacks_parts_have_sources_and_lie_inside_their_bounds():
    """Issue 78: no free constant. Loading checks each part (Part.__post_init__); the catalogue
    loads, so every fitted value is inside the bounds its source sets."""
    from engine.simulation.serving_stacks import serving_stack, stack_names

    assert {"vllm-0.8", "vllm-0.6.0", "vllm-0.5.4", "sglang-0.3.0", "lmdeploy-0.1.0", "ideal"} <= set(stack_names())
    for name in stack_names():
        for part_name, part in serving_stack(name).parts().items():
            low, high = part.bounds
            assert low <= part.value <= high and part.source.strip(), (name, part_name)


def test_a_part_outside_its_sources_bounds_or_without_a_source_is_refused():
    with pytest.raises(ConfigError, match=r"value 0.02 is outside its source's bounds \[0.001, 0.008\] \(v060\)"):
        Part(0.02, "v060", (0.001, 0.008))
    with pytest.raises(ConfigError, match="source: expected where the value or its bounds come from"):
        Part(0.002, " ", (0.001, 0.008))


def test_multi_step_scheduling_admits_only_every_n_steps():
    """With num_scheduler_steps 4 a request arriving while others decode waits for the run of 4
    to end; with 1 it starts at the next step."""

    def first_step_of_late_request(steps: int) -> int:
        engine = LLMEngine(
            EngineConfig(model="simulated:llama-3-8b@h100-80gb", num_scheduler_steps=steps, serving_stack="ideal")
        )
        engine.add_request(list(range(10, 74)), SamplingParams(max_tokens=40, ignore_eos=True))
        for _ in range(3):  # the first one's prefill, then 2 of a run of decode steps
            engine.step()
        late = engine.add_request(list(range(100, 164)), SamplingParams(max_tokens=4, ignore_eos=True))
        for step in range(1, 20):
            if late in engine.step().scheduled:
                return step
        raise AssertionError("never scheduled")

    assert first_step_of_late_request(1) == 1
    assert first_step_of_late_request(4) == 3  # steps 3 and 4 of the run, then admitted
