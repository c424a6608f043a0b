"""Engines for models and GPUs you describe: "simulated:llama-2-7b@h100-80gb".

The engine is the real one (scheduler, block manager, admission control, preemption, metrics);
only its executor is a cost model (cost_model.py, run by executor.py) on a simulated clock, with
the model shapes and GPU profiles of catalogue.py. Memory comes from the memory model, and
impossible setups are refused with the numbers instead of simulated.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from engine.configuration.config import EngineConfig
from engine.configuration.memory import (
    GPU_MEMORY_UTILIZATION,
    MOST_OF_MEMORY,
    activation_bytes_estimate,
    kv_budget_bytes,
    weight_bytes_estimate,
)
from engine.configuration.speculation_methods import speculation_method
from engine.errors import ConfigError
from engine.execution.prepared_model import KvMemoryLimits, PreparedModel
from engine.model_spec.kv_layout import KvLayout
from engine.quantization import UNQUANTIZED, weight_format
from engine.quantization.auto import AUTO, CONFIGURED
from engine.quantization.kv_cache import resolve_kv_dtype
from engine.simulation.catalogue import catalogued_hardware, hardware_profile, model_shape
from engine.simulation.cost_model import CostModel
from engine.simulation.executor import DraftModel, SimulatedClock, SimulatedExecutor
from engine.simulation.parallel import Parallelism
from engine.simulation.serving_stacks import AUTO as AUTO_STACK
from engine.simulation.serving_stacks import DEFAULT_STACK, IDEAL, serving_stack
from engine.simulation.target import PREFIX, SimulatedTarget, is_simulated, target_name  # noqa: F401  (the package's names)

# Simulated GPUs compute in 16 bits; their KV cache holds what kv_cache_dtype names (auto: 16
# bits; int8: 8-bit codes and a 16-bit scale per token and head, as the CPU's).
COMPUTE_DTYPE = torch.float16


def watched_in_real_time(config: EngineConfig) -> EngineConfig:
    """A simulated engine someone watches or sends requests to (the window, `serve`) runs at the
    pace of real time unless a speed was chosen; headless runs keep 0, as fast as the host allows.
    A real engine is returned as it is."""
    if not is_simulated(config.model) or config.simulation_speed:
        return config
    return dataclasses.replace(config, simulation_speed=1.0)


def prepare_simulated_model(config: EngineConfig) -> PreparedModel:
    target = SimulatedTarget.parse(config.model)
    name, hardware_name, gpu_count, single_gpu = target.model, target.hardware, target.gpu_count, target.gpu
    if config.data_parallel_size > 1 or config.prefill_instances:
        raise ConfigError(
            f"data_parallel_size = {config.data_parallel_size}, prefill_instances = {config.prefill_instances}: one "
            "engine is one instance; several run as a deployment (engine/deployment.py, which workbench "
            "bench and sweep build), expected the defaults here"
        )
    choice = CONFIGURED
    if config.quantization == AUTO:  # the catalogue's shapes are 16-bit checkpoints
        config, choice = (
            dataclasses.replace(config, quantization=UNQUANTIZED),
            "auto: a simulated 16-bit checkpoint runs unquantized",
        )
    shape, _ = model_shape(name)
    hardware = hardware_profile(single_gpu)
    if config.serving_stack == AUTO_STACK:
        config = dataclasses.replace(
            config, serving_stack=DEFAULT_STACK if single_gpu in catalogued_hardware() else IDEAL
        )
    stack = serving_stack(config.serving_stack)
    parallelism = Parallelism(config.tensor_parallel_size, config.pipeline_parallel_size)
    parallelism.check(shape, name, gpu_count, hardware_name)
    if parallelism.gpus > 1 and not hardware.link_bytes_s:
        raise ConfigError(
            f"{hardware_name}: {single_gpu} has no link catalogued (link_bytes_s) to join several of them"
        )
    bits, group_size = weight_format(config.quantization, config.group_size)
    weights = weight_bytes_estimate(shape, bits, group_size)
    gpu_weights = parallelism.weight_bytes_per_gpu(weights)  # every figure below is one GPU's
    activations = activation_bytes_estimate(shape, config.max_num_batched_tokens, 2, config.max_num_seqs)
    activations += parallelism.all_reduce_buffer_bytes(shape, config.max_num_batched_tokens)
    usable = kv_budget_bytes(hardware.memory_bytes, MOST_OF_MEMORY, activations)  # before the weights
    each = f"each of {gpu_count} GPUs' " if gpu_count > 1 else ""
    if activations >= hardware.memory_bytes:
        raise ConfigError(
            f"max_num_batched_tokens, max_num_seqs: one step's activations ({config.max_num_batched_tokens:,} tokens, "
            "logits for "
            f"{config.max_num_seqs:,} sequences) need {activations / 1e9:,.1f} GB but {each}{single_gpu} has "
            f"{hardware.memory_bytes / 1e9:.1f} GB; lower them"
        )
    if gpu_weights >= usable:
        share = f" ({gpu_weights / 1e9:.1f} GB on each of {parallelism.gpus})" if parallelism.gpus > 1 else ""
        raise ConfigError(
            f"{name} weights need {weights / 1e9:.1f} GB at {bits} bits{share} but {single_gpu} has "
            f"{hardware.memory_bytes / 1e9:.1f} GB "
            f"({usable / 1e9:.1f} GB after runtime overhead and activations); choose fewer bits, a smaller model, a "
            "larger GPU or more of them (tensor_parallel_size)"
        )
    clock = SimulatedClock(speed=config.simulation_speed)
    kv_dtype = resolve_kv_dtype(config.kv_cache_dtype, COMPUTE_DTYPE, torch.device("cpu"))
    kv_bytes_per_token = shape.kv_bytes_per_token(kv_dtype.itemsize)
    # The engine counts KV blocks in the whole model's bytes; one GPU holds this share of each.
    kv_share = parallelism.kv_bytes_per_token_per_gpu(shape, kv_dtype.itemsize) / kv_bytes_per_token

    def create_executor(num_blocks: int) -> SimulatedExecutor:
        cost_model = CostModel(
            shape, hardware, weights, kv_bytes_per_token, parallelism, stack, config.num_scheduler_steps
        )
        block_bytes = KvLayout.of(shape).block_bytes(config.block_size, kv_bytes_per_token // shape.num_layers)
        drafting = (
            DraftModel(config.draft_acceptance_rate, config.draft_cost_fraction, config.seed)
            if speculation_method(config.speculative_method).simulated_draft_model
            else None
        )
        return SimulatedExecutor(cost_model, clock, kv_cache_bytes=num_blocks * block_bytes, draft_model=drafting)

    return PreparedModel(
        config=config,
        quantization_choice=choice,
        model_config=shape,
        tokenizer=None,
        model_path=Path(config.model),
        stored_tensor_types={},
        device=torch.device("cpu"),
        dtype=COMPUTE_DTYPE,
        kv_dtype=kv_dtype,
        weight_bytes=weights,
        unquantized_weight_bytes=shape.num_parameters * 2,
        activation_smoothing=None,
        clock=clock,
        sleep=clock.advance,
        idle_wait_is_free=not config.simulation_speed,
        kv_limits=KvMemoryLimits(
            free_bytes=int(kv_budget_bytes(hardware.memory_bytes, MOST_OF_MEMORY, gpu_weights, activations) / kv_share),
            default_bytes=int(
                kv_budget_bytes(hardware.memory_bytes, GPU_MEMORY_UTILIZATION, gpu_weights, activations) / kv_share
            ),
            where=f"{hardware_name} ({each}{hardware.memory_bytes / 2**30:,.1f} GiB, {gpu_weights / 2**30:,.2f} GiB "
            "of weights" + (", K/V counted as the whole model's bytes" if gpu_count > 1 else "") + ")",
            must_hold_longest_request=True,
        ),
        create_executor=create_executor,
    )
