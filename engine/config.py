"""`EngineConfig`: every knob of the engine, validated when it is built.

Names follow vLLM's vocabulary (`max_num_seqs`, `max_num_batched_tokens`, `block_size`, ...) so
that an engineer who knows vLLM can read a preset without a glossary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from engine.errors import ConfigError
from engine.quantization import get_method
from engine.quantization.auto import AUTO

SCHEDULING_POLICIES = ("fcfs", "priority")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# How the decode step is compiled: while the engine already serves eagerly, before loading ends,
# or not at all.
COMPILE_DECODE_CHOICES = ("background", "blocking", "off")
# Overrides compile_decode's default for a whole process (the test suite sets "off": every test
# engine compiling its own graph would take the two cores for minutes).
COMPILE_DECODE_ENVIRONMENT = "WORKBENCH_COMPILE_DECODE"


def default_compile_decode(otherwise: str = "background") -> str:
    return os.environ.get(COMPILE_DECODE_ENVIRONMENT, otherwise)


@dataclass
class EngineConfig:
    # Model: the alias "smollm2-135m" (the bundled GGUF), a .gguf file, a Hugging Face directory,
    # or "simulated:MODEL@HARDWARE" (a catalogued shape on a catalogued GPU, see engine.simulation).
    model: str = "smollm2-135m"
    # "auto" picks CUDA when available, else CPU.
    device: str = "auto"
    # "auto" is float32 on CPU and bfloat16 on CUDA.
    dtype: str = "auto"
    # The KV cache's dtype (vLLM's name): "auto" is the compute dtype. bfloat16 on a float32 CPU
    # engine halves the cache's bytes and the bytes every decode step's attention reads (keys and
    # values are rounded to bf16 as written; attention runs in bf16 with float32 accumulation).
    kv_cache_dtype: str = "auto"
    # Longest prompt + output a request may have; None means the model's own context length.
    max_model_len: int | None = None

    # Paged KV cache. Tokens per block: smaller blocks waste less memory at the end of each
    # sequence but make block tables longer.
    block_size: int = 16
    # KV cache size: an int is bytes; a float in (0, 1] is a fraction of the device's free memory
    # once the weights are loaded. None (the default) is vLLM's convention on GPUs, real or
    # simulated: whatever is left of 90% of the device's memory after the weights and a step's
    # activations; on the CPU, 1 GiB.
    kv_cache_memory: int | float | None = None
    # Exact number of KV blocks, overriding kv_cache_memory (for experiments and tests).
    num_kv_blocks: int | None = None
    enable_prefix_caching: bool = True

    # Continuous batching: at most this many sequences and this many tokens in one step.
    # More sequences raise tokens/s and per-user latency together.
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 1024
    # Split long prompts over several steps that also carry decodes, instead of one huge step.
    enable_chunked_prefill: bool = True
    # Admission control: prompts of at least this many tokens wait in their own queue, and at most
    # max_long_prefills of them prefill at once, each in chunks of at most this many tokens.
    # 0 turns the long-prompt queue off (one FIFO queue for everyone).
    long_prompt_threshold: int = 512
    max_long_prefills: int = 1
    # The long queue's guarantee: a long prompt that has waited this long (seconds since arrival)
    # is admitted before anyone else, so steady short traffic cannot starve it. 0 = no guarantee.
    long_prompt_max_wait_s: float = 5.0
    # "fcfs" serves in arrival order; "priority" serves lower `priority` values first.
    scheduling_policy: str = "fcfs"

    # Quantization of the attention and MLP projections (see engine/quantization/): weight-only
    # none, int8, int4 (group_size 32, 64 or 128), bnb-int8, bnb-nf4 (less memory and, with the
    # packed kernels, faster single-stream decode), or w8a8, int8 weights and per-token int8
    # activations (integer products: faster batched steps; smoothed at load, engine/smoothing.py),
    # at some quality cost. "auto" (the default) runs a GGUF file in its own precision where a
    # method reproduces it, and sets group_size and quantize_lm_head too (engine/quantization/auto.py);
    # the engine's config then holds the choice.
    quantization: str = "auto"
    group_size: int = 32
    # Quantize the LM head too, to int8 per channel (for int8, int4, w8a8): in fp32 it is a fifth of
    # SmolLM2's weights, read in full every decode step.
    quantize_lm_head: bool = False
    # CPU, int4 and int8 only: every quantized layer also keeps its weights as a dense bf16 copy
    # (2 bytes per weight more) and multiplies by it in steps of 8 rows or more, where torch's
    # packed kernels are 2-3x slower than a bf16 product (engine.quantization.base.BATCHED_ROWS).
    # "auto" sets it when the copy takes at most a quarter of the machine's memory.
    batched_bf16_copy: bool = False

    # Run decode-only steps as one torch.compile graph (engine.executor.DecodeGraph): fewer, fused
    # operators and less Python per step (docs/compiled-decode.md). The first compile takes
    # minutes on a small CPU (later runs reuse the on-disk cache), so by default ("background") the
    # engine serves eagerly while a thread compiles, and switches once the graph is ready;
    # "blocking" compiles before loading ends; "off" stays eager. On failure decode stays eager.
    # true and false (older presets) mean "blocking" and "off".
    compile_decode: str = field(default_factory=default_compile_decode)

    # Simulated models only ("simulated:MODEL@HARDWARE"): simulated seconds per wall-clock
    # second; 0 runs as fast as the host allows.
    simulation_speed: float = 0.0

    # Seed for requests that carry none of their own.
    seed: int = 0

    # Build each step's causal record (engine/step_trace.py: what the scheduler saw, scheduled,
    # allocated, freed and emitted), returned in StepResult.trace. Off only to measure its cost.
    step_trace: bool = True

    def __post_init__(self) -> None:
        for name, minimum in (
            ("block_size", 1),
            ("max_num_seqs", 1),
            ("max_num_batched_tokens", 1),
            ("max_long_prefills", 1),
            ("long_prompt_threshold", 0),
        ):
            _require_int(name, getattr(self, name), minimum)
        if self.max_model_len is not None:
            _require_int("max_model_len", self.max_model_len, 2)
        if self.num_kv_blocks is not None:
            _require_int("num_kv_blocks", self.num_kv_blocks, 1)
        _require_number("long_prompt_max_wait_s", self.long_prompt_max_wait_s)
        memory = self.kv_cache_memory
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, float))):
            raise ConfigError(f"kv_cache_memory: expected bytes (int) or a fraction (float), got {memory!r}")
        if isinstance(memory, float) and not 0.0 < memory <= 1.0:  # also refuses NaN
            raise ConfigError(f"kv_cache_memory: a fraction must be in (0, 1], got {memory}")
        if isinstance(memory, int) and memory < 1:
            raise ConfigError(f"kv_cache_memory: expected a positive number of bytes, got {memory}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ConfigError(
                f"scheduling_policy: expected one of {', '.join(SCHEDULING_POLICIES)}, got {self.scheduling_policy!r}"
            )
        if self.quantization != AUTO:
            get_method(self.quantization)  # refuses unknown names, listing the registry's
        for name in ("dtype", "kv_cache_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ConfigError(f"{name}: expected one of {', '.join(DTYPES)}, got {getattr(self, name)!r}")
        if not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ConfigError(f"device: expected 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        _require_number("simulation_speed", self.simulation_speed)
        _require_int("seed", self.seed, 0)
        if isinstance(self.compile_decode, bool):
            self.compile_decode = "blocking" if self.compile_decode else "off"
        if self.compile_decode not in COMPILE_DECODE_CHOICES:
            raise ConfigError(
                f"compile_decode: expected one of {', '.join(COMPILE_DECODE_CHOICES)}, got {self.compile_decode!r}"
                + (
                    f" (from ${COMPILE_DECODE_ENVIRONMENT})"
                    if os.environ.get(COMPILE_DECODE_ENVIRONMENT) == self.compile_decode
                    else ""
                )
            )
        for name in (
            "enable_prefix_caching",
            "enable_chunked_prefill",
            "quantize_lm_head",
            "batched_bf16_copy",
            "step_trace",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: expected true or false, got {getattr(self, name)!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"model: expected an alias, a .gguf file or a directory, got {self.model!r}")

    @property
    def long_prompt_queue_enabled(self) -> bool:
        return self.long_prompt_threshold > 0

    def to_dict(self) -> dict:
        return {field.name: getattr(self, field.name) for field in fields(self)}


def _require_number(name: str, value: object) -> None:
    """A finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ConfigError(f"{name}: expected a finite number >= 0, got {value!r}")


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}: expected an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name}: expected at least {minimum}, got {value}")
