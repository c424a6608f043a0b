"""`KvLayout`: which layers share a KV block, and which forget what leaves their window.

A model with sliding-window layers (Gemma 3: five local layers for each global one) needs only
the last `window` tokens' K/V in those layers. As in vLLM's hybrid KV cache manager, the layers
are split into groups of equal size, each group either full-attention or sliding-window, and
every group has its own block table per sequence, drawn from one shared pool of blocks. A block
holds `tensors_per_block` layers' K/V for `block_size` tokens; the layer at index i of its group
reads and writes tensor i of the pool through its group's tables. A sliding-window group's
blocks go back to the pool as the window moves past them, so a 32,768-token request on Gemma 3
270M holds 32k tokens of K/V in its three global layers and about a window's worth in the other
fifteen.

A model without sliding-window layers has one full-attention group of all its layers: one block
table, one tensor pair per layer, as before groups existed.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.model_spec.model_config import ModelConfig


@dataclass(frozen=True)
class KvGroup:
    layers: tuple[int, ...]
    window: int | None  # tokens a query sees in these layers, its own included; None: all of them


@dataclass(frozen=True)
class KvLayout:
    groups: tuple[KvGroup, ...]

    @classmethod
    def of(cls, config: ModelConfig) -> KvLayout:
        full = tuple(layer for layer in range(config.num_layers) if not config.is_sliding(layer))
        sliding = tuple(layer for layer in range(config.num_layers) if config.is_sliding(layer))
        if not full or not sliding:
            return cls((KvGroup(full or sliding, None if full else config.sliding_window),))
        # vLLM's rule: the smaller kind's count is the group size; the other kind is cut into
        # groups of that size (the last one may be smaller: its block's spare tensors go unused).
        size = min(len(full), len(sliding))
        groups = [KvGroup(full[start : start + size], None) for start in range(0, len(full), size)]
        groups += [
            KvGroup(sliding[start : start + size], config.sliding_window) for start in range(0, len(sliding), size)
        ]
        return cls(tuple(groups))

    @property
    def windows(self) -> tuple[int | None, ...]:
        """Each group's window (None: full attention), in group order: what the block manager needs."""
        return tuple(group.window for group in self.groups)

    @property
    def tensors_per_block(self) -> int:
        """Layers whose K/V one block holds: the largest group's size."""
        return max(len(group.layers) for group in self.groups)

    def describe(self) -> str:
        """E.g. "1 full-attention group and 5 sliding-window groups (512 tokens) of 3 layers"."""
        full = sum(group.window is None for group in self.groups)
        windowed = [group.window for group in self.groups if group.window is not None]
        kinds = [f"{full} full-attention group{'s' * (full != 1)}"] if full else []
        if windowed:
            kinds.append(f"{len(windowed)} sliding-window group{'s' * (len(windowed) != 1)} ({windowed[0]:,} tokens)")
        return f"{' and '.join(kinds)} of {self.tensors_per_block} layers"

    def place(self, layer: int) -> tuple[int, int]:
        """(group, tensor): whose block tables the layer uses, and which of the pool's tensors."""
        for group_index, group in enumerate(self.groups):
            if layer in group.layers:
                return group_index, group.layers.index(layer)
        raise ValueError(f"layer {layer}: not in the model's {sum(len(g.layers) for g in self.groups)} layers")

    def block_bytes(self, block_size: int, layer_token_bytes: int) -> int:
        """One block's bytes: `layer_token_bytes` is one token's K and V in one layer."""
        return self.tensors_per_block * block_size * layer_token_bytes

    def blocks_held(self, num_tokens: int, block_size: int, chunk: int = 1) -> int:
        return blocks_held(self.windows, num_tokens, block_size, chunk)


def blocks_held(windows: tuple[int | None, ...], num_tokens: int, block_size: int, chunk: int = 1) -> int:
    """The most blocks a sequence holds once `num_tokens` tokens are computed in steps of at most
    `chunk` tokens, given each KV group's window: every position in a full-attention group; in a
    window group at most the window before the step plus the step's tokens."""
    every_position = -(-num_tokens // block_size)
    return sum(
        every_position if window is None else min(every_position, -(-(window - 1 + chunk) // block_size) + 1)
        for window in windows
    )
