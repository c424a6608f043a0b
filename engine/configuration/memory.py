"""Where memory goes: weights, KV cache, activations and the rest, each figure marked measured or
estimated, with its arithmetic written out (the memory panel and reports show these lines)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine.model_spec.kv_layout import KvLayout
from engine.model_spec.model_config import ModelConfig


@dataclass(frozen=True)
class MemoryLine:
    name: str
    bytes: int
    arithmetic: str
    measured: bool


def activation_bytes_estimate(config: ModelConfig, tokens: int, bytes_per_element: int, sampled_rows: int) -> int:
    """Peak live activations of one step, one layer at a time: the residual stream, its norm, q/k/v
    and attention output, and the MLP's gate, up and product, plus float32 logits for the rows that
    sample. Inference frees each layer's tensors before the next, so layers do not add up."""
    per_token = 4 * config.hidden_size + 2 * config.num_kv_heads * config.head_dim + 3 * config.intermediate_size
    return tokens * per_token * bytes_per_element + sampled_rows * config.vocab_size * 4


def process_resident_bytes() -> int:
    """Resident memory of this process (Linux), measured."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mib(count: float) -> str:
    """The window's unit: its size column, KV capacity and engine settings are all in MiB."""
    return f"{count / 2**20:,.1f} MiB"


def memory_lines(
    config: ModelConfig,
    *,
    weight_bytes: int,
    kv_cache_bytes: int,
    kv_blocks: int,
    block_size: int,
    kv_bytes_per_token: int,
    bytes_per_element: int,
    step_tokens: int,
    max_seqs: int,
    resident_bytes: int | None,
    weight_parts: dict[str, int] | None = None,
) -> list[MemoryLine]:
    """`weight_parts`: the weights' bytes by what the tensors hold (a quantized engine's formats, its
    batched copy): then the weights line adds those up, as they are what the engine holds."""
    params = config.num_parameters
    activations = activation_bytes_estimate(config, step_tokens, bytes_per_element, max_seqs)
    if weight_parts and len(weight_parts) > 1:
        largest_first = sorted(weight_parts.items(), key=lambda part: -part[1])
        weights_text = " + ".join(f"{part} {_mib(size)}" for part, size in largest_first) + f" = {_mib(weight_bytes)}"
    else:
        weights_text = (
            f"{params / 1e6:,.1f} M params × {bytes_per_element} B = {_mib(params * bytes_per_element)} "
            f"(tensors hold {_mib(weight_bytes)})"
        )
    layout = KvLayout.of(config)
    layer_token_bytes = kv_bytes_per_token // config.num_layers
    allocated = kv_cache_bytes // layout.block_bytes(block_size, layer_token_bytes)
    scratch = " + 1 scratch" if allocated > kv_blocks else ""  # the torch executor's (engine/execution/executor.py)
    kv_text = (
        f"({kv_blocks:,}{scratch}) blocks × {block_size} tokens × {layout.tensors_per_block} layers × "
        f"{layer_token_bytes:,} B (2 × {config.num_kv_heads} kv heads × "
        f"{config.kv_row_text(_kv_bytes_per_element(config, kv_bytes_per_token))}) = {_mib(kv_cache_bytes)}"
    )
    if len(layout.groups) > 1:
        windows = sum(group.window is not None for group in layout.groups)
        kv_text += (
            f"; a block serves one of {len(layout.groups)} groups of layers ({windows} sliding-window, whose blocks "
            "are freed as the window moves on)"
        )
    lines = [
        MemoryLine("weights", weight_bytes, weights_text, measured=True),
        MemoryLine("KV cache", kv_cache_bytes, kv_text, measured=True),
        MemoryLine(
            "activations",
            activations,
            f"{step_tokens:,} tokens/step × "
            f"{4 * config.hidden_size + 2 * config.num_kv_heads * config.head_dim + 3 * config.intermediate_size:,} "
            f"values × {bytes_per_element} B + {max_seqs} × {config.vocab_size:,} logits × 4 B ≈ "
            f"{_mib(activations)}",
            measured=False,
        ),
    ]
    if resident_bytes is not None:
        other = max(0, resident_bytes - weight_bytes - kv_cache_bytes - activations)
        lines.append(
            MemoryLine(
                "other",
                other,
                f"process resident {_mib(resident_bytes)} − the lines above = {_mib(other)} "
                "(runtime, libraries, tokenizer, buffers)",
                measured=True,
            )
        )
    return lines


# Allowance for what neither weights, KV cache nor activations account for (CUDA context,
# allocator fragmentation, framework buffers): a stated assumption, not a measurement.
RUNTIME_OVERHEAD_FRACTION = 0.05
# The default KV cache: on a GPU (real or simulated), what is left of this share of its memory
# after the weights and one step's activations (vLLM's gpu_memory_utilization); on the CPU, a
# fixed size, since the host's memory is shared with everything else.
GPU_MEMORY_UTILIZATION = 0.9
CPU_DEFAULT_KV_CACHE_BYTES = 1 << 30
# The most of a device's memory the engine lets the K/V budget below take (a user's
# kv_cache_memory up to it); its default takes GPU_MEMORY_UTILIZATION.
MOST_OF_MEMORY = 1 - RUNTIME_OVERHEAD_FRACTION


def kv_budget_bytes(memory_bytes: float, share: float, *uses: float) -> int:
    """The memory budget, in one place: what is left for K/V of `share` of a device's memory once
    `uses` (one device's weights, a step's activations, an all-reduce buffer, what is already
    allocated) are taken out; negative where they do not fit. The engine (real GPUs and
    simulated ones), `estimate`, the Memory tab and the per-GPU lines all call it."""
    return int(memory_bytes * share - sum(uses))


QUANT_GROUP_OVERHEAD_BYTES = 4  # a 16-bit scale and a 16-bit minimum per group


def weight_bytes_estimate(config: ModelConfig, bits: int, group_size: int | None = None) -> int:
    """Projections at `bits` (plus per-group scale and minimum when grouped); embeddings, norms
    and biases at 16 bits, or at `bits` when that is wider (an fp32 model)."""
    total = config.num_parameters
    projections = config.num_projection_parameters
    rest_bits = max(bits, 16)
    overhead = projections // group_size * QUANT_GROUP_OVERHEAD_BYTES if group_size else 0
    return projections * bits // 8 + (total - projections) * rest_bits // 8 + overhead


def params_only_line(params: float, bits: int) -> MemoryLine:
    """The worked number: parameters x bytes per parameter, before KV cache and runtime overhead."""
    total = int(params * bits / 8)
    return MemoryLine(
        "weights",
        total,
        f"{params / 1e9:.1f} × 10⁹ params × {bits / 8:g} bytes = {total / 1e9:.1f} GB "
        "(before KV cache and runtime overhead)",
        measured=False,
    )


def _weights_line(config: ModelConfig, bits: int, group_size: int | None) -> MemoryLine:
    weights = weight_bytes_estimate(config, bits, group_size)
    return MemoryLine(
        "weights",
        weights,
        f"{config.num_parameters / 1e9:.2f} × 10⁹ params, projections at {bits} bits"
        + (f" + scale and minimum per {group_size}" if group_size else "")
        + f" = {weights / 1e9:.2f} GB",
        measured=False,
    )


def _kv_bytes_per_element(config: ModelConfig, kv_bytes_per_token: int) -> int:
    """The cache's bytes per number, from its bytes per token."""
    return next(size for size in (1, 2, 4) if config.kv_bytes_per_token(size) == kv_bytes_per_token)


def _kv_per_token_arithmetic(config: ModelConfig, kv_bytes: int) -> str:
    return (
        f"{config.kv_bytes_per_token(kv_bytes) / 1024:,.0f} KiB/token (2 × {config.num_layers} layers × "
        f"{config.num_kv_heads} kv heads × {config.kv_row_text(kv_bytes)})"
    )


def kv_request_bytes(config: ModelConfig, kv_bytes: int, context: int, per_token_text: str) -> tuple[int, str]:
    """One `context`-token request's K/V once computed, and the arithmetic (`per_token_text`: how
    to write one token's K/V in every layer): every token in the full-attention layers, at most the
    window in sliding-window layers (their blocks are freed as the window moves on:
    engine/model_spec/kv_layout.py)."""
    per_token = config.kv_bytes_per_token(kv_bytes)
    sliding = config.num_sliding_layers
    if not sliding or context <= config.sliding_window:
        return per_token * context, f"{per_token_text} × {context:,} tokens"
    layer_token = per_token // config.num_layers
    return layer_token * config.attended_positions(context), (
        f"{layer_token / 1024:,.0f} KiB/layer/token × ({config.num_layers - sliding} full-attention layers × "
        f"{context:,} tokens + {sliding} sliding-window layers × {config.sliding_window:,} tokens)"
    )


def model_memory_lines(
    config: ModelConfig, bits: int, kv_bytes: int, context: int, concurrent: int, group_size: int | None = None
) -> list[MemoryLine]:
    """What a model needs whatever the device: weights, KV per token and per request, and the
    weights plus the KV cache of `concurrent` requests of `context` tokens."""
    weights = _weights_line(config, bits, group_size)
    per_token = config.kv_bytes_per_token(kv_bytes)
    per_request, request_arithmetic = kv_request_bytes(config, kv_bytes, context, f"{per_token / 1024:,.0f} KiB")
    total = weights.bytes + concurrent * per_request
    return [
        weights,
        MemoryLine("KV per token", per_token, _kv_per_token_arithmetic(config, kv_bytes), measured=False),
        MemoryLine(
            "KV per request",
            per_request,
            f"{request_arithmetic} = {per_request / 1e9:.3f} GB",
            measured=False,
        ),
        MemoryLine(
            f"{concurrent:,} requests",
            total,
            f"weights + {concurrent:,} × {per_request / 1e9:.3f} GB = {total / 1e9:.2f} GB "
            "(before activations and runtime overhead)",
            measured=False,
        ),
    ]


def runtime_overhead_line(memory_bytes: float) -> MemoryLine:
    """The allowance for what no other line accounts for (CUDA context, fragmentation, buffers)."""
    return MemoryLine(
        "runtime overhead",
        int(memory_bytes * RUNTIME_OVERHEAD_FRACTION),
        f"{RUNTIME_OVERHEAD_FRACTION:.0%} of {memory_bytes / 1e9:.0f} GB (assumed allowance)",
        measured=False,
    )


def concurrency_lines(
    config: ModelConfig,
    memory_bytes: float,
    bits: int,
    kv_bytes: int,
    context: int,
    step_tokens: int,
    max_seqs: int,
    group_size: int | None = None,
) -> tuple[list[MemoryLine], int]:
    """The memory budget of a device for a model, and how many `context`-token requests fit."""
    weights = _weights_line(config, bits, group_size)
    activations = activation_bytes_estimate(config, step_tokens, max(bits, 16) // 8, max_seqs)
    free = kv_budget_bytes(memory_bytes, MOST_OF_MEMORY, weights.bytes, activations)
    per_request, request_arithmetic = kv_request_bytes(
        config, kv_bytes, context, _kv_per_token_arithmetic(config, kv_bytes)
    )
    fits = max(0, free // per_request)
    lines = [
        weights,
        MemoryLine(
            "activations",
            activations,
            f"{step_tokens} tokens/step, one layer live at a time ≈ {activations / 1e9:.3f} GB",
            measured=False,
        ),
        runtime_overhead_line(memory_bytes),
        MemoryLine(
            "KV cache",
            max(free, 0),
            f"{memory_bytes / 1e9:.1f} GB − the lines above = {free / 1e9:.2f} GB; "
            f"{request_arithmetic} = {per_request / 1e9:.3f} GB per request",
            measured=False,
        ),
    ]
    return lines, int(fits)
