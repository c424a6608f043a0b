"""KV groups at the mission's size: a 32,000-token prompt on Gemma 3 270M's shape (simulated, so
the scheduler and block manager run for real in seconds) holds every token only in the global
layers, as the memory model says."""

from __future__ import annotations

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.configuration.memory import kv_request_bytes
from engine.simulation.cost_model import StepShape

GEMMA_ON_A100 = "simulated:gemma3-270m@a100-80gb"


def test_a_32k_prompt_holds_the_window_in_local_layers_and_everything_in_global_ones():
    engine = LLMEngine(EngineConfig(model=GEMMA_ON_A100, max_num_batched_tokens=2048, long_prompt_threshold=0))
    assert engine.kv_layout.describe() == "1 full-attention group and 5 sliding-window groups (512 tokens) of 3 layers"
    request_id = engine.add_request([7] * 32_000, SamplingParams(max_tokens=2, ignore_eos=True))
    peak = 0
    while engine.sequence(request_id).num_output_tokens == 0:
        engine.step()
        peak = max(peak, engine.block_manager.num_used_blocks)
    seq = engine.sequence(request_id)
    held = len(engine.block_manager.held_block_ids(seq))
    # 32,000 tokens: 2,000 global blocks; each window group keeps the blocks from position 31,489 on.
    assert held == 2_000 + 5 * (2_000 - 31_489 // 16)
    # At most the window plus one 2,048-token chunk in each window group, at any step.
    assert peak <= 2_000 + 5 * (-(-(511 + 2048) // 16) + 1)
    # The memory model's figure, in block-granular bytes: within one block per group.
    held_bytes = held * engine.kv_block_bytes
    layer_token_bytes = engine.kv_bytes_per_token // engine.model_config.num_layers
    estimate, _ = kv_request_bytes(engine.model_config, 2, 32_000, "")  # 16-bit K/V on a simulated GPU
    assert abs(held_bytes - estimate) <= 6 * 16 * 3 * layer_token_bytes
    assert held_bytes < 0.2 * 32_000 * engine.kv_bytes_per_token  # the full-attention figure


def test_the_simulated_gpu_reads_the_window_in_sliding_window_layers():
    engine = LLMEngine(EngineConfig(model=GEMMA_ON_A100, max_model_len=32_768))
    cost_model = engine.executor.cost_model
    layer_token_bytes = engine.kv_bytes_per_token / 18
    decode_at = StepShape(((1, 32_000, True),))
    assert cost_model.kv_bytes(decode_at) == (3 * 32_000 + 15 * 512) * layer_token_bytes
    assert cost_model.kv_bytes(StepShape(((1, 300, True),))) == 18 * 300 * layer_token_bytes


@pytest.mark.parametrize("chunk", [17, 65, 1017])
def test_no_step_holds_more_blocks_than_the_can_it_ever_fit_check_counts(chunk):
    """`blocks_held` is what admission checks against the whole cache; a window group's span
    (window - 1 + chunk positions) can straddle one more block than it fills. Measured at each
    execution, when the step's blocks are allocated and the old ones not yet released: with
    chunks of 17 tokens a sequence holds 733 blocks, where the count without the straddling block
    says 731 (a request admitted that the cache can never hold)."""
    engine = LLMEngine(
        EngineConfig(
            model=GEMMA_ON_A100, max_num_batched_tokens=chunk, long_prompt_threshold=0, enable_prefix_caching=False
        )
    )
    request_id = engine.add_request([7] * 9_000, SamplingParams(max_tokens=50, ignore_eos=True))
    peak = 0
    execute = engine.executor.execute

    def measured(batch):
        nonlocal peak
        peak = max(peak, len(engine.block_manager.held_block_ids(engine.sequence(request_id))))
        return execute(batch)

    engine.executor.execute = measured
    while engine.has_unfinished():
        engine.step()
    assert 0 < peak <= engine.scheduler.blocks_held(9_050)
