"""Engines for models and GPUs you describe: "simulated:llama-2-7b@h100-80gb".

The engine is the real one (scheduler, block manager, admission control, preemption, metrics);
only its executor is a cost model (engine/cost_model.py) on a simulated clock. Memory comes from
the memory model, and impossible setups are refused with the numbers instead of simulated.
"""

from __future__ import annotations

from pathlib import Path

import torch

from engine.catalogue import hardware_profile, model_shape
from engine.config import EngineConfig
from engine.cost_model import CostModel
from engine.errors import ConfigError
from engine.llm_engine import LLMEngine
from engine.memory import GPU_MEMORY_UTILIZATION, RUNTIME_OVERHEAD_FRACTION, activation_bytes_estimate, weight_bytes_estimate
from engine.model_source import ProgressCallback, no_progress
from engine.simulated_executor import SimulatedClock, SimulatedExecutor

PREFIX = "simulated:"
QUANTIZATION_BITS = {"none": 16, "int8": 8, "int4": 4, "w8a8": 8, "bnb-int8": 8, "bnb-nf4": 4}


def is_simulated(model: str) -> bool:
    return model.startswith(PREFIX)


def parse(model: str) -> tuple[str, str]:
    body = model.removeprefix(PREFIX)
    name, separator, hardware = body.partition("@")
    if not separator or not name or not hardware:
        raise ConfigError(f"model: expected 'simulated:MODEL@HARDWARE', e.g. simulated:llama-2-7b@h100-80gb; got {model!r}")
    return name, hardware


def create_engine(config: EngineConfig, progress: ProgressCallback = no_progress, source=None) -> LLMEngine:
    """A real engine, or a simulated one for "simulated:MODEL@HARDWARE"."""
    if is_simulated(config.model):
        return simulated_engine(config)
    return LLMEngine(config, progress=progress, source=source)


def simulated_engine(config: EngineConfig) -> LLMEngine:
    name, hardware_name = parse(config.model)
    shape, _ = model_shape(name)
    hardware = hardware_profile(hardware_name)
    bits = QUANTIZATION_BITS[config.quantization]
    weights = weight_bytes_estimate(shape, bits, config.group_size if bits == 4 else None)
    activations = activation_bytes_estimate(shape, config.max_num_batched_tokens, 2, config.max_num_seqs)
    usable = hardware.memory_bytes * (1 - RUNTIME_OVERHEAD_FRACTION) - activations
    if activations >= hardware.memory_bytes:
        raise ConfigError(
            f"max_num_batched_tokens, max_num_seqs: one step's activations ({config.max_num_batched_tokens:,} tokens, logits for "
            f"{config.max_num_seqs:,} sequences) need {activations / 1e9:,.1f} GB but {hardware_name} has "
            f"{hardware.memory_bytes / 1e9:.1f} GB; lower them"
        )
    if weights >= usable:
        raise ConfigError(
            f"{name} weights need {weights / 1e9:.1f} GB at {bits} bits but {hardware_name} has {hardware.memory_bytes / 1e9:.1f} GB "
            f"({usable / 1e9:.1f} GB after runtime overhead and activations); choose fewer bits, a smaller model or a larger GPU"
        )
    clock = SimulatedClock(speed=config.simulation_speed)
    engine = LLMEngine.__new__(LLMEngine)
    engine.model_path = Path(config.model)
    engine.stored_tensor_types = {}
    engine.activation_smoothing = None
    engine.unquantized_weight_bytes = shape.num_parameters * 2
    engine._init_scheduling(config, shape, None, clock, torch.device("cpu"), torch.float16, weights)
    engine.sleep = clock.advance
    free = int(usable - weights)
    default = int(hardware.memory_bytes * GPU_MEMORY_UTILIZATION - weights - activations)
    where = f"{hardware_name} ({hardware.memory_bytes / 2**30:,.1f} GiB, {weights / 2**30:,.2f} GiB of weights)"
    num_blocks = engine._num_kv_blocks(free, default, where)
    executor = SimulatedExecutor(CostModel(shape, hardware, weights, engine.kv_bytes_per_token), clock)
    executor.kv_cache_bytes = num_blocks * config.block_size * engine.kv_bytes_per_token
    engine.executor = executor
    engine._init_cache(num_blocks)
    longest = engine.max_model_len
    if engine.block_manager.blocks_to_cover(longest) > num_blocks:
        raise ConfigError(
            f"one {longest:,}-token request needs {longest * engine.kv_bytes_per_token / 1e9:.2f} GB of KV cache but the "
            f"KV cache holds {executor.kv_cache_bytes / 1e9:.2f} GB ({num_blocks:,} blocks); at most {max(free, 0) / 1e9:.2f} GB "
            f"fit on {hardware_name} after the weights: raise kv_cache_memory, lower max_model_len or use fewer weight bits"
        )
    return engine
