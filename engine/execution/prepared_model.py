"""What an executor kind has set up before the engine sizes its KV cache.

`LLMEngine` builds one of these from its config (`engine.torch_model.prepare_torch_model` for a
model file, `engine.simulation.prepare_simulated_model` for "simulated:MODEL@HARDWARE"), sizes
the KV cache from its memory limits, then asks it for the executor. The engine never needs to know
which kind it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.configuration.config import EngineConfig
from engine.execution.executor import ModelExecutor
from engine.execution.smoothing import Smoothing
from engine.loading.tokenizer import Tokenizer
from engine.model_spec.model_config import ModelConfig


@dataclass
class KvMemoryLimits:
    free_bytes: int  # the most the KV cache may take once the weights are in place
    default_bytes: int  # its size when the config leaves kv_cache_memory unset
    where: str  # the memory these refer to, for error messages
    # Refuse a cache that cannot hold one request of max_model_len (simulations: a planned
    # configuration that can never serve its longest request is a mistake, not a scenario).
    must_hold_longest_request: bool = False


@dataclass
class PreparedModel:
    config: EngineConfig  # as it runs: quantization "auto" replaced by its choice
    quantization_choice: str  # why it runs that quantization
    model_config: ModelConfig
    tokenizer: Tokenizer | None
    model_path: Path
    stored_tensor_types: dict[str, int]  # how the file kept its weights, e.g. {"Q4_1": 210}
    device: torch.device
    dtype: torch.dtype  # the compute dtype
    kv_dtype: torch.dtype  # the KV cache's
    weight_bytes: int
    unquantized_weight_bytes: int
    activation_smoothing: Smoothing | None
    clock: Callable[[], float]
    sleep: Callable[[float], None]  # how a caller waits for the next arrival on this clock
    # True for a simulated clock that runs as fast as the host allows: a wait of any length costs no
    # wall time, so a caller jumps to the next arrival rather than polling its way there.
    idle_wait_is_free: bool
    kv_limits: KvMemoryLimits
    create_executor: Callable[[int], ModelExecutor]  # for a KV cache of this many blocks
    # weight_bytes by what the tensors hold (engine.quantization.weight_parts); empty when simulated
    weight_parts: dict[str, int] = field(default_factory=dict)
