"""`EngineConfig`: every knob of the engine, validated when it is built.

Names follow vLLM's vocabulary (`max_num_seqs`, `max_num_batched_tokens`, `block_size`, ...) so
that an engineer who knows vLLM can read a preset without a glossary.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields

from engine.configuration.speculation_methods import speculation_method
from engine.errors import ConfigError
from engine.quantization import BATCHED_ROWS, get_method
from engine.quantization.auto import AUTO
from engine.quantization.kv_cache import QUANTIZED_KV_CACHE_DTYPES

SCHEDULING_POLICIES = ("fcfs", "priority")
DTYPES = ("auto", "float32", "bfloat16", "float16")
KV_CACHE_DTYPES = (*DTYPES, *QUANTIZED_KV_CACHE_DTYPES)
# How the decode step is compiled: while the engine already serves eagerly, before loading ends,
# or not at all.
COMPILE_DECODE_CHOICES = ("background", "blocking", "off")
# How decode steps speculate (vLLM's speculative_config "method"): not at all, by n-gram prompt
# lookup (no second model), or, on simulated GPUs, by a draft model whose cost and acceptance are
# settings (engine/scheduling/speculation.py).
# How many tokens a speculating sequence proposes from step to step (transformers' assisted
# generation's names): always num_speculative_tokens, or the heuristic that follows its acceptance.
SPECULATIVE_SCHEDULES = ("constant", "heuristic")
# Overrides compile_decode's default for a whole process (the test suite sets "off": every test
# engine compiling its own graph would take the two cores for minutes).
COMPILE_DECODE_ENVIRONMENT = "WORKBENCH_COMPILE_DECODE"


def default_compile_decode(otherwise: str = "background") -> str:
    return os.environ.get(COMPILE_DECODE_ENVIRONMENT, otherwise)


def knob(default=MISSING, *, help: str, default_factory=MISSING):
    """A configuration field with its help, written once: the window's tooltips, the knob table in
    docs/knobs.md and the `--set` help are made from it (`knob_help`, `knobs_markdown`)."""
    return field(default=default, default_factory=default_factory, metadata={"help": help})


# Each integer setting's range: the least that means anything, and the most any engine here can use (past
# 64 bits a setting reached torch and numpy as an OverflowError at load). The lookup's cost is prompt
# length x prompt_lookup_max per sequence and step (10^6 made each decode step take 2 s, issue 77).
MAX_BYTES = 1 << 50  # 1 PiB
MAX_TOKENS = 1 << 31
INTEGER_BOUNDS: dict[str, tuple[int, int]] = {
    "block_size": (1, 1 << 16),
    "group_size": (1, 1 << 16),
    "max_num_seqs": (1, 1 << 20),
    "max_num_batched_tokens": (1, MAX_TOKENS),
    "max_long_prefills": (1, 1 << 20),
    "long_prompt_threshold": (0, MAX_TOKENS),
    "max_model_len": (2, MAX_TOKENS),
    "num_kv_blocks": (1, MAX_TOKENS),
    "num_scheduler_steps": (1, 1024),
    "tensor_parallel_size": (1, 4096),
    "pipeline_parallel_size": (1, 4096),
    "data_parallel_size": (1, 4096),
    "prefill_instances": (0, 4096),
    "num_speculative_tokens": (1, 64),
    "prompt_lookup_max": (1, 64),
    "prompt_lookup_min": (1, 64),
    "seed": (0, (1 << 63) - 1),
}
OPTIONAL_INTEGERS = ("max_model_len", "num_kv_blocks")  # None: the model's context, the memory's blocks
MAX_SECONDS = 1e6  # long_prompt_max_wait_s: eleven days
MAX_SIMULATION_SPEED = 1e6


@dataclass
class EngineConfig:
    model: str = knob(
        "smollm2-135m",
        help="A bundled alias: smollm2-135m (SmolLM2-135M, Q4_1 GGUF) or gemma3-270m (Gemma 3 270M, Q4_K_M GGUF, "
        "32k context, sliding-window layers); a .gguf file, a Hugging Face folder "
        "(safetensors), simulated:MODEL@HARDWARE (the same scheduler on a catalogued GPU, timed by a cost "
        "model), or in the window a server's URL (http://HOST:PORT), whose own settings then apply.",
    )
    device: str = knob("auto", help="auto: CUDA when available, else CPU; or cpu, cuda, cuda:N.")
    dtype: str = knob(
        "auto",
        help="Compute dtype. auto: a bf16/fp16 safetensors model's own 16-bit dtype (bfloat16 on a CPU); "
        "otherwise float32 on a CPU (exact), bfloat16 on CUDA.",
    )
    kv_cache_dtype: str = knob(
        "auto",
        help="The KV cache's dtype (vLLM's name). auto: the compute dtype, except that quantization auto keeps "
        "a quantized file's cache in bfloat16 on a CPU. bfloat16 on a float32 engine: half the bytes per "
        "token, twice the tokens in the same memory (K/V rounded to bf16 as written, attention accumulates "
        "in float32). int8 (the CPU): each token's K and V row per KV head rounded to 8 bits with its own "
        "float16 scale, 1.94x the tokens of bfloat16 at head_dim 64 (docs/quantization.md). fp8_e4m3 "
        "(the CPU): the same rows as 8-bit floats (4 exponent, 3 mantissa bits) with the same scales "
        "and bytes; read by shifting bits, the CPU having no fp8 arithmetic.",
    )
    max_model_len: int | None = knob(
        None, help="Longest prompt + output a request may have; none: the model's own context length."
    )

    block_size: int = knob(
        16,
        help="Tokens per KV block: small blocks waste less at sequence ends, large ones mean shorter block tables.",
    )
    kv_cache_memory: int | float | None = knob(
        None,
        help="KV cache size: bytes (an integer), or a fraction in (0, 1] of the memory free after the weights. "
        "None: on a GPU, real or simulated, what 90% of its memory leaves after the weights and a step's "
        "activations (vLLM's convention); on a CPU, 1 GiB.",
    )
    num_kv_blocks: int | None = knob(
        None, help="An exact number of KV blocks, overriding kv_cache_memory (experiments and tests)."
    )
    enable_prefix_caching: bool = knob(
        True, help="Reuse the KV blocks of identical prompt prefixes instead of recomputing them."
    )

    max_num_seqs: int = knob(
        64, help="Most sequences in one step: more raise tokens/s and each user's latency together."
    )
    max_num_batched_tokens: int = knob(
        1024, help="Token budget per step (prefill + decode): larger prefill chunks, longer steps."
    )
    enable_chunked_prefill: bool = knob(
        True, help="Split long prompts over steps that also carry decodes, instead of one huge step."
    )
    long_prompt_threshold: int = knob(
        512,
        help="Admission control: prompts of at least this many tokens wait in their own queue and prefill in "
        "chunks of at most this size, beside the short ones (0 = one queue for everyone).",
    )
    max_long_prefills: int = knob(1, help="At most this many long prompts prefill at once.")
    long_prompt_max_wait_s: float = knob(
        5.0,
        help="The long queue's guarantee: a long prompt that has waited this many seconds is admitted before "
        "anyone else, so steady short traffic cannot starve it (0 = no guarantee).",
    )
    scheduling_policy: str = knob(
        "fcfs", help="fcfs: arrival order; priority: lower priority values first (and preempted last)."
    )

    quantization: str = knob(
        "auto",
        help="Quantization of the attention and MLP projections, at some quality cost (workbench quality). "
        "auto: the file's own precision where a method reproduces it (a Q4_1 GGUF runs as int4 g32 + int8 "
        "head), else none. int8, int4, bnb-int8, bnb-nf4: weight-only, less memory and faster single-stream "
        "decode. w8a8: int8 weights and per-token int8 activations, integer products that speed up large "
        "batches and prefill.",
    )
    group_size: int = knob(
        32,
        help="Group size of grouped formats (int4): smaller groups keep more quality and cost more scale and "
        "minimum bytes.",
    )
    quantize_lm_head: bool = knob(
        False,
        help="Quantize the vocabulary projection too, to int8 (for int8, int4, w8a8): in float32 it is a fifth "
        "of SmolLM2's weights, read in full every decode step. auto decides it from the file.",
    )
    batched_bf16_copy: bool = knob(
        False,
        help=f"int4 and int8 on a CPU: keep every quantized layer's weights as a bf16 copy too (2 bytes per "
        f"weight more) and use it in steps of {BATCHED_ROWS} rows or more, where the packed kernels are 2-3x "
        "slower on a CPU with native bf16. auto keeps it when it takes at most a quarter of the machine's memory "
        "and a timing at load shows it faster on this CPU.",
    )

    compile_decode: str = knob(
        default_factory=default_compile_decode,
        help="Run decode-only steps as one torch.compile graph: fewer, fused operators and less Python per "
        "step; and the layers' parts either side of attention compiled for steps that prefill "
        "(docs/compiled-decode.md). Compiling takes minutes on a 2-core CPU, seconds once cached. "
        "background: serve eagerly while a thread compiles, then switch; blocking: compile before loading "
        "ends; off: stay eager.",
    )

    simulation_speed: float = knob(
        0.0,
        help="Simulated models only: simulated seconds per wall-clock second (0 = as fast as the host allows).",
    )
    num_scheduler_steps: int = knob(
        1,
        help="Admit waiting requests only every N decode steps (vLLM 0.6's multi-step scheduling, "
        "--num-scheduler-steps): a step that prefills runs alone and starts the count again. On a simulated GPU "
        "a run of N decode steps makes one scheduler call; a step that prefills makes its own.",
    )
    serving_stack: str = knob(
        "auto",
        help="Simulated models only: the serving software whose own costs the simulated GPU adds to its "
        "roofline (presets/catalogue/stacks.toml: vllm-0.8 (V1), vllm-0.6.0, vllm-0.5.4, sglang-0.3.0, "
        "lmdeploy-0.1.0, ideal), each built of physical parts with their sources. auto: vllm-0.8 on a catalogued "
        "GPU, ideal on a profile measured on this machine (its host time is measured with it).",
    )
    tensor_parallel_size: int = knob(
        1,
        help="Simulated models only: GPUs each layer is split across (vLLM's name). Times pipeline_parallel_size, "
        "as many GPUs as the hardware names (simulated:llama-3-70b@4xh100-80gb).",
    )
    pipeline_parallel_size: int = knob(
        1,
        help="Simulated models only: stages the layers are split into, which each step passes one after another "
        "(vLLM's name).",
    )
    data_parallel_size: int = knob(
        1,
        help="Simulated models only: instances of the model, each on tensor_parallel_size x pipeline_parallel_size "
        "GPUs, every request routed to the least busy (vLLM's name). The hardware names all their GPUs "
        "(simulated:llama-3-8b@4xh100-80gb with 4 instances of one GPU).",
    )
    prefill_instances: int = knob(
        0,
        help="Simulated models only: of the data_parallel_size instances, how many only prefill (prefill/decode "
        "disaggregation); the rest only decode, taking each request's K/V over the GPUs' link once its first "
        "token is out. 0: every instance does both (colocated).",
    )
    speculative_method: str = knob(
        "off",
        help="Speculative decoding (vLLM's speculative_config method; docs/speculation.md). ngram: each decode "
        "step also computes up to num_speculative_tokens tokens copied from where the sequence's last "
        "prompt_lookup_max..prompt_lookup_min tokens occurred before, keeping those the model agrees with; greedy "
        "requests only, whose tokens stay exactly those of plain decoding. draft (simulated GPUs only): a draft "
        "model proposes them, each accepted with draft_acceptance_rate, at draft_cost_fraction of a step each.",
    )
    num_speculative_tokens: int = knob(
        3, help="Speculative decoding: most tokens proposed per sequence and step (each takes one of the token budget)."
    )
    num_speculative_tokens_schedule: str = knob(
        "constant",
        help="Speculative decoding: constant proposes up to num_speculative_tokens every step (vLLM's way); "
        "heuristic (transformers' assisted generation's) starts there, proposes 2 more after a step that "
        "accepted all it proposed and 1 fewer after one that did not (at least 1), per sequence: fewer rows "
        "spent on a model that copies poorly (docs/speculation.md).",
    )
    prompt_lookup_max: int = knob(4, help="ngram speculation: the longest run of last tokens looked up.")
    prompt_lookup_min: int = knob(
        2,
        help="ngram speculation: the shortest run of last tokens looked up. 1 proposes more often and is "
        "rejected more; with the heuristic schedule it was the fastest on SmolLM2 copying text at one stream "
        "(TPOT p50 1.47x against 1.35x at 2, docs/speculation.md).",
    )
    draft_acceptance_rate: float = knob(
        0.7,
        help="draft speculation (simulated GPUs): the chance that the target model agrees with each proposed "
        "token, given it agreed with those before (published EAGLE/draft-model runs: 0.6-0.8).",
    )
    draft_cost_fraction: float = knob(
        0.1,
        help="draft speculation (simulated GPUs): one draft-model step's time as a fraction of the target's "
        "decode step at the same batch (a 1B draft for an 8B target: about 0.1-0.15).",
    )
    seed: int = knob(0, help="Seed for requests that carry none of their own.")
    step_trace: bool = knob(
        True,
        help="Record each step's causal record (what the scheduler saw, scheduled, allocated, freed and "
        "emitted) for the Step panel and workbench trace; off only to measure its cost.",
    )

    def __post_init__(self) -> None:
        for name, (minimum, maximum) in INTEGER_BOUNDS.items():
            if name not in OPTIONAL_INTEGERS or getattr(self, name) is not None:
                _require_int(name, getattr(self, name), minimum, maximum)
        if self.prefill_instances and self.prefill_instances >= self.data_parallel_size:
            raise ConfigError(
                f"prefill_instances: {self.prefill_instances} of data_parallel_size {self.data_parallel_size} "
                "instances leaves none to decode; expected fewer than data_parallel_size (0 for colocated)"
            )
        _require_number("long_prompt_max_wait_s", self.long_prompt_max_wait_s, MAX_SECONDS)
        memory = self.kv_cache_memory
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, float))):
            raise ConfigError(f"kv_cache_memory: expected bytes (int) or a fraction (float), got {memory!r}")
        if isinstance(memory, float) and not 0.0 < memory <= 1.0:  # also refuses NaN
            raise ConfigError(f"kv_cache_memory: a fraction must be in (0, 1], got {memory}")
        if isinstance(memory, int):
            _require_int("kv_cache_memory", memory, 1, MAX_BYTES)
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ConfigError(
                f"scheduling_policy: expected one of {', '.join(SCHEDULING_POLICIES)}, got {self.scheduling_policy!r}"
            )
        if self.quantization != AUTO:
            get_method(self.quantization)  # refuses unknown names, listing the registry's
        for name, choices in (("dtype", DTYPES), ("kv_cache_dtype", KV_CACHE_DTYPES)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"{name}: expected one of {', '.join(choices)}, got {getattr(self, name)!r}")
        if not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ConfigError(f"device: expected 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        _require_number("simulation_speed", self.simulation_speed, MAX_SIMULATION_SPEED)
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
        self._check_speculation()
        if not isinstance(self.serving_stack, str) or not self.serving_stack:
            raise ConfigError(f"serving_stack: expected a stack's name or 'auto', got {self.serving_stack!r}")
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

    def _check_speculation(self) -> None:
        speculation_method(self.speculative_method)  # refuses unknown names, listing the registry's
        if self.num_speculative_tokens_schedule not in SPECULATIVE_SCHEDULES:
            raise ConfigError(
                f"num_speculative_tokens_schedule: expected one of {', '.join(SPECULATIVE_SCHEDULES)}, "
                f"got {self.num_speculative_tokens_schedule!r}"
            )
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ConfigError(
                f"prompt_lookup_min: expected at most prompt_lookup_max ({self.prompt_lookup_max}), "
                f"got {self.prompt_lookup_min}"
            )
        for name in ("draft_acceptance_rate", "draft_cost_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name}: expected a number in [0, 1], got {value!r}")

    @property
    def speculates(self) -> bool:
        return speculation_method(self.speculative_method).proposes

    @property
    def long_prompt_queue_enabled(self) -> bool:
        return self.long_prompt_threshold > 0


def _require_number(name: str, value: object, maximum: float) -> None:
    """A number in [0, maximum] (a 400-digit integer is refused here, not by a float() later)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= maximum:
        raise ConfigError(f"{name}: expected a number from 0 to {maximum:g}, got {_shown(value)}")


def _require_int(name: str, value: object, minimum: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}: expected an integer, got {_shown(value)}")
    if not minimum <= value <= maximum:
        raise ConfigError(f"{name}: expected an integer from {minimum} to {maximum:,}, got {_shown(value)}")


def _shown(value: object) -> str:
    """A value as a message quotes it: a number of hundreds of digits by its length."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"


def knob_help(name: str) -> str:
    """An EngineConfig field's help (KeyError for a name that is none)."""
    return {knob.name: knob.metadata["help"] for knob in fields(EngineConfig)}[name]
