"""What the kernel tests share: a paged KV cache scattered over random blocks, and the error
measure kernels are held to against their torch references."""

from __future__ import annotations

import torch

from kernels.paged_attention import write_kv_cache

BLOCK_SIZE, HEAD_DIM = 4, 16


def scattered_cache(lengths, kv_heads, generator, head_dim=HEAD_DIM):
    """Random K/V per sequence written into shuffled blocks of a shared cache."""
    blocks_needed = [-(-length // BLOCK_SIZE) for length in lengths]
    order = torch.randperm(sum(blocks_needed) + 3, generator=generator).tolist()
    key_cache = torch.zeros(len(order), BLOCK_SIZE, kv_heads, head_dim)
    value_cache = torch.zeros_like(key_cache)
    tables, contents = [], []
    for length, count in zip(lengths, blocks_needed):
        table, order = order[:count], order[count:]
        keys, values = (
            torch.randn(length, kv_heads, head_dim, generator=generator),
            torch.randn(length, kv_heads, head_dim, generator=generator),
        )
        slots = torch.tensor([table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(length)])
        write_kv_cache(keys, values, key_cache, value_cache, slots)
        tables.append(table)
        contents.append((keys, values))
    return key_cache, value_cache, tables, contents


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected.float()).norm() / expected.float().norm().clamp(min=1e-12)).item()
