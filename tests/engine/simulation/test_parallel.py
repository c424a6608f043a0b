"""Several GPUs on paper (issue 50 #1): the split's memory per GPU and its communication, each
against arithmetic done by hand, and the splits a model or the hardware cannot take."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.configuration.memory import activation_bytes_estimate, weight_bytes_estimate
from engine.errors import ConfigError
from engine.simulation.catalogue import hardware_profile, model_shape
from engine.simulation.parallel import Parallelism, parse_gpu_count, per_gpu_lines
from workbench.cli import main

LLAMA_3_70B, _ = model_shape("llama-3-70b")  # 80 layers, 64 heads, 8 KV heads of 128, hidden 8192


def test_llama_3_70b_on_four_h100s_by_hand():
    weights = weight_bytes_estimate(LLAMA_3_70B, 16)  # 141.1 GB: no single catalogued GPU holds it
    assert 141.0e9 < weights < 141.2e9
    lines, fits = per_gpu_lines(LLAMA_3_70B, Parallelism(tensor=4), 80e9, 16, 2, 8192, 2048, 256)
    by_name = {line.name: line.bytes for line in lines}
    assert by_name["weights"] == -(-weights // 4)  # a quarter each
    assert by_name["all-reduce buffer"] == 2048 * 8192 * 2
    per_token = 2 * 80 * (8 // 4) * 128 * 2  # K and V, 80 layers, 2 KV heads each, fp16: 80 KiB
    assert Parallelism(tensor=4).kv_bytes_per_token_per_gpu(LLAMA_3_70B, 2) == per_token == 81_920
    free = 80e9 - by_name["weights"] - activation_bytes_estimate(LLAMA_3_70B, 2048, 2, 256) - 2048 * 8192 * 2 - 4e9
    assert by_name["KV cache"] == int(free)
    assert fits == int(free) // (8192 * per_token) == 59


def test_fewer_kv_heads_than_gpus_are_replicated_and_stages_split_the_layers():
    tp16 = Parallelism(tensor=16)
    assert tp16.kv_heads_per_gpu(LLAMA_3_70B) == 1  # 8 KV heads over 16 GPUs: one each, replicated
    assert tp16.kv_bytes_per_token_per_gpu(LLAMA_3_70B, 2) == 2 * 80 * 1 * 128 * 2
    pp4 = Parallelism(pipeline=4)
    assert pp4.kv_bytes_per_token_per_gpu(LLAMA_3_70B, 2) == 2 * 20 * 8 * 128 * 2  # a quarter of the layers
    assert pp4.bubble == 0.75 and Parallelism(tensor=8).bubble == 0.0


def test_a_steps_communication_by_hand():
    """Two all-reduces per layer under TP, each the faster of one-shot and ring for its size
    (tests/engine/simulation/test_step_cost_by_hand.py has both at two sizes); one hand-over between stages."""
    link, hop = 450e9, 5e-6
    payload = 2048 * 8192 * 2  # 2,048 tokens of 8,192 fp16 activations: a ring's size
    one = 2 * 3 / 4 * payload / link + 2 * 3 * hop  # ring over 4: 2(n-1)/n of it per link, 2(n-1) hops
    tp4 = Parallelism(tensor=4)
    assert tp4.all_reduce_s(2048, LLAMA_3_70B, link, hop) == pytest.approx(one, rel=1e-12)
    assert one == pytest.approx(141.85e-6, rel=1e-3)
    assert tp4.communication_s(2048, LLAMA_3_70B, link, hop) == pytest.approx(2 * 80 * one, rel=1e-12)
    pp2 = Parallelism(pipeline=2)  # one hand-over between the two stages
    assert pp2.communication_s(2048, LLAMA_3_70B, link, hop) == pytest.approx(payload / link + hop)
    assert Parallelism().communication_s(2048, LLAMA_3_70B, link, hop) == 0.0
    assert Parallelism().communication_s(2048, LLAMA_3_70B, 0.0, 0.0) == 0.0  # a profile with no link: one GPU


def one_decode_by_hand(gpu, weights: int, tensor: int, kv_share: float, context: int) -> float:
    """One sequence's decode step on one TP rank, operator by operator (engine/simulation/
    operators.py), each at its smooth roofline: (memory^k + compute^k)^(1/k)."""
    model = LLAMA_3_70B
    per_weight = weights / model.num_parameters
    table = model.vocab_size * model.hidden_size
    bandwidth = gpu.bandwidth_bytes_s * gpu.bandwidth_efficiency
    kv_bandwidth = gpu.bandwidth_bytes_s * gpu.kv_bandwidth_efficiency
    peak, k = gpu.peak_flops * gpu.compute_efficiency, gpu.roofline_sharpness

    def roofline(memory_s: float, compute_s: float) -> float:
        return (memory_s**k + compute_s**k) ** (1 / k)

    embedding = roofline(model.hidden_size * per_weight / bandwidth, 0.0)
    dense = roofline(
        (weights - 2 * table * per_weight) / tensor / bandwidth, 2 * model.num_projection_parameters / tensor / peak
    )
    attention = roofline(
        context * model.kv_bytes_per_token(2) * kv_share / kv_bandwidth,
        4 * model.num_heads * model.head_dim * model.num_layers * context / tensor / peak,
    )
    head = roofline((table * per_weight + model.vocab_size * 4) / tensor / bandwidth, 2 * table / tensor / peak)
    sampling = roofline(model.vocab_size * 4 * 3 / bandwidth, 0.0)
    return embedding + dense + attention + head + sampling


@pytest.mark.parametrize(
    "tp, pp, gpus, said",
    [
        (3, 1, 3, "tensor_parallel_size: llama-3-70b's 64 attention heads do not divide by 3"),
        (1, 3, 3, "pipeline_parallel_size: llama-3-70b's 80 layers do not divide by 3"),
        (2, 1, 4, "4xh100-80gb has 4 GPUs, not the 2 these settings split the model over"),
        (0, 1, 1, "expected at least 1, got 0 and 1"),
    ],
)
def test_splits_the_model_or_the_hardware_cannot_take_are_named(tp, pp, gpus, said):
    with pytest.raises(ConfigError, match=said.replace("(", r"\(")):
        Parallelism(tp, pp).check(LLAMA_3_70B, "llama-3-70b", gpus, f"{gpus}xh100-80gb")


def test_kv_heads_that_neither_divide_nor_are_divided_are_refused():
    six_kv_heads = dataclasses.replace(LLAMA_3_70B, num_heads=48, num_kv_heads=6)
    with pytest.raises(ConfigError, match="6 KV heads neither divide by 4 nor divide it"):
        Parallelism(tensor=4).check(six_kv_heads, "m", 4, "4xh100-80gb")


def test_gpu_counts_are_read_from_the_hardware_name():
    assert parse_gpu_count("4xh100-80gb") == (4, "h100-80gb")
    assert parse_gpu_count("rtx-4090") == (1, "rtx-4090") and parse_gpu_count("h100-80gb") == (1, "h100-80gb")
    with pytest.raises(ConfigError, match="'0xh100-80gb': expected 1 to 256 GPUs, as in 4xh100-80gb, got 0"):
        parse_gpu_count("0xh100-80gb")
    assert parse_gpu_count("256xh100-80gb") == (256, "h100-80gb")
    # Issue 58 #10: a million instances grew past 4.5 GB in 46 s before anything said no.
    with pytest.raises(ConfigError, match="expected 1 to 256 GPUs, as in 4xh100-80gb, got 1,000,000"):
        parse_gpu_count("1000000xh100-80gb")


def test_estimate_prints_one_gpus_memory_and_what_the_group_holds(capsys):
    assert (
        main(["estimate", "--model", "llama-3-70b", "--hardware", "h100-80gb", "--tp", "4", "--context", "8192"]) == 0
    )
    printed = capsys.readouterr().out
    assert "4xh100-80gb: TP 4 x PP 1" in printed and "NVLink 4" in printed
    assert "141.11 GB at 16 bits / (4 x 1 GPUs) = 35.28 GB" in printed
    assert "=> 59 concurrent 8,192-token requests fit" in printed
    assert main(["estimate", "--model", "llama-3-70b", "--hardware", "4xh100-80gb", "--tp", "2", "--pp", "2"]) == 0
    assert "each GPU idles 50% of a step (pipeline bubble)" in capsys.readouterr().out
    assert main(["estimate", "--model", "llama-3-70b", "--hardware", "4xh100-80gb", "--tp", "3"]) == 2
    assert "4xh100-80gb has 4 GPUs, not the 3 these settings split the model over" in capsys.readouterr().err


def test_llama_3_70b_runs_on_four_simulated_h100s_at_the_hand_computed_pace():
    from engine import EngineConfig, LLMEngine, SamplingParams
    from engine.simulation.cost_model import StepShape

    with pytest.raises(ConfigError, match="llama-3-70b weights need 141.1 GB at 16 bits but h100-80gb has 80.0 GB"):
        LLMEngine(EngineConfig(model="simulated:llama-3-70b@h100-80gb", max_model_len=2048))
    engine = LLMEngine(
        EngineConfig(model="simulated:llama-3-70b@4xh100-80gb", tensor_parallel_size=4, max_model_len=2048)
    )
    # The cache: what one GPU has left, over one token's K/V on one GPU (80 KiB), in whole blocks.
    weights, step_tokens, seqs = weight_bytes_estimate(LLAMA_3_70B, 16), 1024, 64  # the engine's defaults
    assert (engine.config.max_num_batched_tokens, engine.config.max_num_seqs) == (step_tokens, seqs)
    activations = activation_bytes_estimate(LLAMA_3_70B, step_tokens, 2, seqs) + step_tokens * 8192 * 2
    left = 80e9 * 0.9 - -(-weights // 4) - activations  # GPU_MEMORY_UTILIZATION 0.9, as vLLM's default
    assert abs(engine.kv_capacity_tokens - left / 81_920) < 16  # 444,640 tokens here
    # One decode step of one 1,000-token sequence, by hand: each GPU streams a quarter of the
    # weights and its 2 KV heads' share of the K/V, then 2 all-reduces per layer of one token's
    # 16 KiB, one-shot (3 x 16 KiB over its link, one hop); no serving software ("ideal").
    h100 = hardware_profile("h100-80gb")
    ideal = LLMEngine(dataclasses.replace(engine.config, serving_stack="ideal"))
    all_reduces = 2 * 80 * (3 * 8192 * 2 / 450e9 + h100.link_latency_s)
    by_hand = one_decode_by_hand(h100, weights, 4, 0.25, 1000) + all_reduces + h100.step_overhead_s
    assert ideal.executor.cost_model.step_time(StepShape(((1, 1000, True),))) == pytest.approx(by_hand, rel=1e-9)
    # The default stack adds its host time: vLLM V1's, from presets/catalogue/stacks.toml: one
    # scheduler call for the one sequence, its output processing overlapped, graph launches
    # hidden behind the GPU's time.
    assert engine.config.serving_stack == "vllm-0.8"
    vllm = engine.executor.cost_model.stack
    call = vllm.schedule_s.value + vllm.schedule_per_sequence_s.value
    assert engine.executor.cost_model.step_time(StepShape(((1, 1000, True),))) == pytest.approx(
        call + by_hand, rel=1e-9
    )
    request = engine.add_request(list(range(1, 129)), SamplingParams(max_tokens=8, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    assert engine.sequence(request) is None  # finished: 8 tokens on the group
    with pytest.raises(ConfigError, match="need a simulated model"):
        LLMEngine(EngineConfig(model="smollm2-135m", tensor_parallel_size=2))


def test_llama_3_70b_on_four_h100s_runs_in_bench_sweep_and_replay(tmp_path):
    group = ["--set", "engine.model=simulated:llama-3-70b@4xh100-80gb", "--set", "engine.tensor_parallel_size=4"]
    few = ["--set", "traffic.num_requests=20"]
    bench = tmp_path / "bench"
    assert main(["bench", "--preset", "chat-steady", *group, *few, "--out", str(bench), "--no-plots"]) == 0
    report = json.loads((bench / "report.json").read_text())
    assert report["metrics"]["requests_finished"]["value"] == 20
    assert report["scenario"]["engine"]["tensor_parallel_size"] == 4
    sweep = tmp_path / "sweep"
    vary = ["--vary", "engine.max_num_seqs=8,32"]
    assert main(["sweep", "--preset", "chat-steady", *group, *few, *vary, "--out", str(sweep), "--no-plots"]) == 0
    assert len((sweep / "sweep.csv").read_text().splitlines()) == 3  # a header and two points
    replay = tmp_path / "replay"
    assert main(["replay", str(bench), "--out", str(replay), "--no-plots"]) == 0
    replayed = json.loads((replay / "report.json").read_text())
    # The same settings on a simulated group: every latency again, to the last digit.
    for metric in ("ttft_p50_ms", "tpot_p50_ms", "e2e_p99_ms"):
        assert replayed["metrics"][metric]["value"] == report["metrics"][metric]["value"]


def test_a_pipeline_of_two_stages_charges_its_bubble_by_hand():
    """Issue 58's planted bug: a step under PP 2 charged as if the stages ran at once. Without
    micro-batches the batch passes the two stages one after the other: each stage's time twice,
    plus one hand-over of the activations between them."""
    from engine import EngineConfig, LLMEngine
    from engine.simulation.cost_model import StepShape

    engine = LLMEngine(
        EngineConfig(
            model="simulated:llama-3-70b@4xh100-80gb",
            tensor_parallel_size=2,
            pipeline_parallel_size=2,
            max_model_len=2048,
            serving_stack="ideal",
        )
    )
    h100, weights = hardware_profile("h100-80gb"), weight_bytes_estimate(LLAMA_3_70B, 16)
    # One TP rank over both stages: half the weights (tensor 2) and half the KV heads (4 of 8),
    # each stage's layers one after the other, so the step is both stages' time.
    both_stages = one_decode_by_hand(h100, weights, 2, 0.5, 1000)
    all_reduces = 2 * 80 * (1 * 8192 * 2 / 450e9 + h100.link_latency_s)  # one-shot over 2: one peer's 16 KiB
    hand_over = 8192 * 2 / 450e9 + h100.link_latency_s
    step = engine.executor.cost_model.step_time(StepShape(((1, 1000, True),)))
    assert step == pytest.approx(both_stages + all_reduces + hand_over + h100.step_overhead_s, rel=1e-9)
    assert engine.executor.cost_model.parallelism.bubble == 0.5
