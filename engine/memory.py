"""Where memory goes: weights, KV cache, activations and the rest, each figure marked measured or
estimated, with its arithmetic written out (the memory panel and reports show these lines)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine.model_config import ModelConfig


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


def memory_lines(config: ModelConfig, *, weight_bytes: int, kv_cache_bytes: int, kv_blocks: int, block_size: int,
                 kv_bytes_per_token: int, bytes_per_element: int, step_tokens: int, max_seqs: int, resident_bytes: int | None) -> list[MemoryLine]:
    params = config.num_parameters
    activations = activation_bytes_estimate(config, step_tokens, bytes_per_element, max_seqs)
    lines = [
        MemoryLine("weights", weight_bytes, f"{params / 1e6:,.1f} M params × {bytes_per_element} B = {params * bytes_per_element / 1e6:,.1f} MB "
                   f"(tensors hold {weight_bytes / 1e6:,.1f} MB)", measured=True),
        MemoryLine("KV cache", kv_cache_bytes, f"{kv_blocks:,} blocks × {block_size} tokens × {kv_bytes_per_token:,} B/token "
                   f"(2 × {config.num_layers} layers × {config.num_kv_heads} kv heads × {config.head_dim} dims × {bytes_per_element} B) "
                   f"= {kv_cache_bytes / 1e6:,.1f} MB", measured=True),
        MemoryLine("activations", activations, f"{step_tokens:,} tokens/step × {4 * config.hidden_size + 2 * config.num_kv_heads * config.head_dim + 3 * config.intermediate_size:,} "
                   f"values × {bytes_per_element} B + {max_seqs} × {config.vocab_size:,} logits × 4 B ≈ {activations / 1e6:,.1f} MB", measured=False),
    ]
    if resident_bytes is not None:
        other = max(0, resident_bytes - weight_bytes - kv_cache_bytes - activations)
        lines.append(MemoryLine("other", other, f"process resident {resident_bytes / 1e6:,.1f} MB − the lines above = {other / 1e6:,.1f} MB "
                                "(runtime, libraries, tokenizer, buffers)", measured=True))
    return lines
