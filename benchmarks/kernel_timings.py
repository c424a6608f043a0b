"""Kernel timings for SmolLM2-135M's shapes on the current device (a script, not a test):

    python -m benchmarks.kernel_timings

Quantized matmul (each registered method that runs here: int8, int4 g32, w8a8 on a CPU) against the
dense matmul in the compute dtype at M = 1, 8, 32, 256, and paged-attention decode against the torch
reference; times are medians of repeated runs measured in the same process, with ratios to the dense
/ reference path. Each timed call uses the next of several weight copies (about 256 MB of dense
weights in all), so weights come from memory as they do in the model, not from a warm cache.
"""

from __future__ import annotations

import statistics

import torch

from engine.quantization import METHODS, own_methods
from engine.quantization.base import Unquantized
from kernels.paged_attention import _decode_bucket, paged_decode_attention
from kernels.timing import timed_runs

SHAPES = {
    "q_proj / o_proj": (576, 576),
    "k_proj / v_proj": (192, 576),
    "gate / up": (1536, 576),
    "down_proj": (576, 1536),
    "lm_head": (49152, 576),
}


COLD_BYTES = 256 << 20


def median_ms(function, repeats: int = 20) -> float:
    return statistics.median(timed_runs(function, repeats)) * 1000


# Each method builds its own layers, so each runs the kernels the engine runs on this device.
QUANTIZED = {name: METHODS[name] for name in own_methods() if not isinstance(METHODS[name], Unquantized)}


def _quantized_layers(weights: list[torch.Tensor]) -> dict[str, list[torch.nn.Module]]:
    """{method: one quantized layer per weight copy}, at each method's smallest group size."""
    return {
        name: [method.create_linear(weight, None, min(method.group_sizes, default=0)) for weight in weights]
        for name, method in QUANTIZED.items()
    }


def matmul_rows(device: torch.device) -> list[str]:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    formats = list(QUANTIZED)
    lines = [
        f"{'layer':<16} {'M':>4} {'dense ms':>9} "
        + " ".join(f"{form + ' ms':>8}" for form in formats)
        + " "
        + " ".join(f"{form + ' x':>7}" for form in formats)
        + f"   (dense = {dtype})"
    ]
    for layer, (width, depth) in SHAPES.items():
        copies = max(1, COLD_BYTES // (width * depth * 4))
        weights = [torch.randn(width, depth, device=device) for _ in range(copies)]
        dense = [weight.to(dtype) for weight in weights]
        layers = _quantized_layers(weights)
        del weights
        for rows in (1, 8, 32, 256):
            x = torch.randn(rows, depth, device=device, dtype=dtype)
            cycle = iter(range(10**9))
            dense_ms = median_ms(lambda: x @ dense[next(cycle) % copies].T)
            times = [median_ms(lambda: layers[form][next(cycle) % copies](x)) for form in formats]
            lines.append(
                f"{layer:<16} {rows:>4} {dense_ms:>9.3f} "
                + " ".join(f"{ms:>8.3f}" for ms in times)
                + " "
                + " ".join(f"{dense_ms / ms:>6.2f}x" for ms in times)
            )
    return lines


def attention_rows(device: torch.device) -> list[str]:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    lines = [f"{'paged decode':<16} {'seqs':>4} {'context':>8} {'kernel ms':>10} {'torch ref ms':>13} {'ratio':>6}"]
    block_size, kv_heads, heads, head_dim = 16, 3, 9, 64
    for seqs, context in ((1, 512), (32, 256), (32, 2048), (64, 1024)):
        blocks_per_seq = -(-context // block_size)
        key_cache = torch.randn(seqs * blocks_per_seq, block_size, kv_heads, head_dim, device=device, dtype=dtype)
        value_cache = torch.randn_like(key_cache)
        tables = torch.randperm(seqs * blocks_per_seq, device=device).view(seqs, blocks_per_seq)
        lengths = torch.full((seqs,), context, device=device)
        query = torch.randn(seqs, heads, head_dim, device=device, dtype=dtype)
        kernel = median_ms(
            lambda: paged_decode_attention(query, key_cache, value_cache, tables, lengths, head_dim**-0.5)
        )
        reference = median_ms(
            lambda: _decode_bucket(query, key_cache, value_cache, tables, lengths, head_dim**-0.5, None)
        )
        lines.append(f"{'':<16} {seqs:>4} {context:>8} {kernel:>10.3f} {reference:>13.3f} {reference / kernel:>5.2f}x")
    return lines


def main() -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; torch {torch.__version__}")
    print("\n".join(matmul_rows(device)))
    print()
    print("\n".join(attention_rows(device)))


if __name__ == "__main__":
    main()
