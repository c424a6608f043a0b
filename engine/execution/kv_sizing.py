"""How many KV blocks an engine allocates: from `num_kv_blocks`, or `kv_cache_memory` (bytes, a
fraction of the free bytes, or the default when unset), never more than is free; and, where the
configuration asks, the refusal of a cache that cannot hold one request of `max_model_len`."""

from __future__ import annotations

from engine.configuration.config import EngineConfig
from engine.errors import ConfigError
from engine.execution.prepared_model import KvMemoryLimits


def kv_blocks(config: EngineConfig, limits: KvMemoryLimits, block_bytes: int, layers_per_block: int) -> int:
    """Blocks of `block_bytes` each; ConfigError when more is asked for than is free, or less than
    one block."""
    free_bytes, memory = limits.free_bytes, config.kv_cache_memory
    if config.num_kv_blocks is not None:
        budget = config.num_kv_blocks * block_bytes
    elif memory is None:
        budget = limits.default_bytes
    elif isinstance(memory, float):
        budget = int(memory * free_bytes)
    else:
        budget = memory
    name = "num_kv_blocks" if config.num_kv_blocks is not None else "kv_cache_memory"
    if budget > free_bytes:
        raise ConfigError(
            f"{name}: {budget / 2**20:,.0f} MiB asked for, but {limits.where} leaves "
            f"{max(free_bytes, 0) / 2**20:,.0f} MiB once the weights are loaded; choose a smaller size or a fraction"
        )
    if budget < block_bytes:
        raise ConfigError(
            f"kv_cache_memory: {budget} bytes cannot hold one KV block ({config.block_size} tokens x "
            f"{layers_per_block} layers = {block_bytes} bytes)"
        )
    return budget // block_bytes


def check_the_longest_request_fits(
    longest: int, blocks_needed: int, num_blocks: int, block_bytes: int, cache_bytes: int, limits: KvMemoryLimits
) -> None:
    if blocks_needed > num_blocks:
        raise ConfigError(
            f"one {longest:,}-token request needs {blocks_needed * block_bytes / 1e9:.2f} GB of KV cache but the "
            f"KV cache holds {cache_bytes / 1e9:.2f} GB ({num_blocks:,} blocks); at most "
            f"{max(limits.free_bytes, 0) / 1e9:.2f} GB fit on {limits.where}: raise kv_cache_memory, lower "
            "max_model_len or use fewer weight bits"
        )
