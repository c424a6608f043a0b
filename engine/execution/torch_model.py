"""The real executor's preparation: read the model file, build the decoder on the device, smooth
and quantize it, and say how much memory is left for the KV cache."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from engine.configuration.config import EngineConfig
from engine.configuration.memory import (
    CPU_DEFAULT_KV_CACHE_BYTES,
    GPU_MEMORY_UTILIZATION,
    activation_bytes_estimate,
    kv_budget_bytes,
)
from engine.errors import ConfigError, ModelLoadError
from engine.execution.compile_cache import use_persistent_compile_cache
from engine.execution.executor import TorchExecutor
from engine.execution.model import CausalLM
from engine.execution.prepared_model import KvMemoryLimits, PreparedModel
from engine.execution.smoothing import Smoothing, smooth_for_w8a8
from engine.loading.model_file import ModelSource, ProgressCallback
from engine.loading.model_source import read_model
from engine.platform.device import dtype_name, free_memory_bytes, resolve_device, resolve_dtype, total_memory_bytes
from engine.quantization import UNQUANTIZED, check_quantization, get_method, quantize_model, weight_bytes, weight_parts
from engine.quantization.auto import AUTO, CONFIGURED, choose_quantization
from engine.quantization.kv_cache import resolve_kv_dtype
from kernels.quantized_kv import is_code_dtype


def prepare_torch_model(
    config: EngineConfig,
    progress: ProgressCallback,
    clock: Callable[[], float],
    source: ModelSource | None,
) -> PreparedModel:
    several = [
        f"{name} = {getattr(config, name)}"
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "prefill_instances")
        if getattr(config, name) != (0 if name == "prefill_instances" else 1)
    ]
    if several:
        raise ConfigError(
            f"{', '.join(several)}: several GPUs and instances (and prefill/decode disaggregation) need a simulated "
            f"model (simulated:MODEL@4xGPU); {config.model} runs on one device here, expected the defaults"
        )
    # Before anything compiles: inductor's first use sets the variable to its own folder in /tmp
    # (a load's quantization timing compiles before the decode graph does).
    use_persistent_compile_cache()
    device = resolve_device(config.device)
    source = source or read_model(config.model, progress)
    dtype = resolve_dtype(config.dtype, device, source.weights_dtype)
    config, quantization_choice = _resolve_quantization(config, source, device)
    kv_dtype = resolve_kv_dtype(config.kv_cache_dtype, dtype, device)
    # The Triton attention kernel reads the compute dtype, or an 8-bit cache's codes and scales.
    if device.type == "cuda" and kv_dtype != dtype and not is_code_dtype(kv_dtype):
        raise ConfigError(
            f"kv_cache_dtype: on CUDA the cache holds the compute dtype ({dtype_name(dtype)}), int8 or "
            f"fp8_e4m3; got {config.kv_cache_dtype!r}"
        )
    if device.type == "cpu" and kv_dtype == torch.float16:  # before the weights are read and converted
        raise ConfigError(
            f"kv_cache_dtype: the CPU's attention reads float32, bfloat16, int8 or fp8_e4m3 caches, not float16 "
            f"(kv_cache_dtype {config.kv_cache_dtype!r}, dtype {config.dtype!r}); expected one of those"
        )
    model = _build_model(source, device, dtype)
    unquantized = weight_bytes(model)
    check_quantization(
        config.quantization,
        config.group_size,
        source.config,
        config.quantize_lm_head,
        config.batched_bf16_copy,
        device.type == "cuda",
    )
    smoothing: Smoothing | None = None
    head_weight = None
    if get_method(config.quantization).needs_activation_smoothing:
        progress("calibrate activation smoothing", 0.0)
        smoothing, head_weight = smooth_for_w8a8(model, source.tokenizer, config.quantize_lm_head)
        progress("calibrate activation smoothing", 1.0)
    quantize_model(
        model,
        config.quantization,
        config.group_size,
        config.quantize_lm_head,
        progress,
        head_weight,
        config.batched_bf16_copy,
    )
    parts = weight_parts(model)
    return PreparedModel(
        config=config,
        quantization_choice=quantization_choice,
        model_config=source.config,
        tokenizer=source.tokenizer,
        model_path=source.path,
        stored_tensor_types=source.stored_tensor_types,
        device=device,
        dtype=dtype,
        kv_dtype=kv_dtype,
        weight_bytes=sum(parts.values()),
        weight_parts=parts,
        unquantized_weight_bytes=unquantized,
        activation_smoothing=smoothing,
        clock=clock,
        sleep=time.sleep,
        idle_wait_is_free=False,
        kv_limits=_kv_memory_limits(config, source, device, dtype),
        create_executor=lambda num_blocks: TorchExecutor(
            model, num_blocks, config.block_size, device, kv_dtype, config.compile_decode
        ),
    )


def _resolve_quantization(config: EngineConfig, source: ModelSource, device: torch.device) -> tuple[EngineConfig, str]:
    """The configuration with "auto" replaced by what it chose for this file on this device, and why."""
    if config.quantization != AUTO:
        return config, CONFIGURED
    choice = choose_quantization(
        source.projection_type,
        source.head_type,
        config.group_size,
        source.config,
        device.type,
        total_memory_bytes(device),
        config.kv_cache_dtype,
    )
    try:
        check_quantization(choice.method, choice.group_size, source.config, choice.quantize_lm_head)
    except ConfigError as error:  # e.g. the packed int4 kernels cannot run on this machine
        return dataclasses.replace(
            config, quantization=UNQUANTIZED
        ), f"auto: {choice.method} cannot run here ({error}); unquantized"
    return dataclasses.replace(
        config,
        quantization=choice.method,
        group_size=choice.group_size,
        quantize_lm_head=choice.quantize_lm_head,
        batched_bf16_copy=choice.batched_copy,
        kv_cache_dtype=choice.kv_cache_dtype,
    ), choice.reason


def _kv_memory_limits(
    config: EngineConfig, source: ModelSource, device: torch.device, dtype: torch.dtype
) -> KvMemoryLimits:
    """Called once the weights are loaded: what is free now is what the KV cache may take."""
    free = free_memory_bytes(device)
    if device.type != "cuda":
        return KvMemoryLimits(free, min(CPU_DEFAULT_KV_CACHE_BYTES, free), "this machine's available memory")
    activations = activation_bytes_estimate(
        source.config, config.max_num_batched_tokens, torch.finfo(dtype).bits // 8, config.max_num_seqs
    )
    allocated = torch.cuda.memory_allocated(device)  # the weights, already loaded
    default = min(free, kv_budget_bytes(total_memory_bytes(device), GPU_MEMORY_UTILIZATION, allocated, activations))
    return KvMemoryLimits(free, default, f"{device}'s free memory")


def _build_model(source: ModelSource, device: torch.device, dtype: torch.dtype) -> CausalLM:
    """The decoder with the source's weights, without spending time on a random initialisation."""
    config = source.config
    with torch.device("meta"):
        model = CausalLM(config)
    tensors = dict(source.tensors)
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    expected = set(model.state_dict())
    missing = sorted(expected - tensors.keys())
    unexpected = sorted(name for name in tensors.keys() - expected if not name.endswith("rotary_emb.inv_freq"))
    if missing or unexpected:
        raise ModelLoadError(
            f"{source.path}: weights do not match a {config.architecture} model of this shape "
            f"(missing: {missing[:4]}, unexpected: {unexpected[:4]})"
        )
    try:
        model.load_state_dict({name: tensors[name] for name in expected}, assign=True)
    except RuntimeError as exc:
        raise ModelLoadError(f"{source.path}: a tensor has the wrong shape for the model's config ({exc})") from exc
    # The rotary tables and the embedding scale are computed, not loaded: build them for real
    # outside the meta device.
    model.build_rotary()
    model.embedding_scale = torch.tensor(config.embedding_scale)
    model = model.to(device=device, dtype=dtype).eval()
    model.fuse_projections()
    return model
