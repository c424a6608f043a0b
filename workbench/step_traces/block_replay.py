"""The KV block map at any step, rebuilt from the step traces (engine/requests/step_trace.py).

Applying each step's block changes in order (releases by requests aborted before the step, then
the step's allocations, prefix reuses and releases, then the blocks that became findable by
prefix) gives who holds each block and which free blocks still hold a reusable prefix: the same
map `LocalBackend.block_owners` reads off the live block manager.
"""

from __future__ import annotations

import numpy as np

from engine.requests.step_trace import ALLOCATE, RELEASE, BlockChange, StepTrace
from workbench.backends.protocol import BLOCK_CACHED, BLOCK_FREE, BLOCK_SHARED


class BlockReplay:
    def __init__(self, num_blocks: int):
        self.holders: list[set[str]] = [set() for _ in range(num_blocks)]
        self.findable = np.zeros(num_blocks, dtype=bool)  # holds a prefix a new prompt can reuse
        self.windowed = np.zeros(num_blocks, dtype=bool)  # last taken by a sliding-window group of layers
        self.step = -1  # the last step applied

    def apply(self, trace: StepTrace) -> None:
        self.apply_changes(trace.step, [*trace.released_before, *trace.block_changes], trace.registered)

    def apply_changes(self, step: int, changes: list[BlockChange], registered: list[int]) -> None:
        """One step's block changes in order (releases before it first), then its registrations."""
        for change in changes:
            self._change(change)
        self.findable[registered] = True
        self.step = step

    def _change(self, change: BlockChange) -> None:
        window_blocks = set(change.window_blocks)
        for block_id in change.block_ids:
            if change.action == RELEASE:
                self.holders[block_id].discard(change.request_id)
            else:
                if change.action == ALLOCATE:  # a fresh block's old prefix is overwritten
                    self.findable[block_id] = False
                self.holders[block_id].add(change.request_id)
                self.windowed[block_id] = block_id in window_blocks

    def owners(self, rows: dict[str, int]) -> np.ndarray:
        """Per block: the row number of the request holding it (`rows`: request id -> row),
        BLOCK_SHARED, BLOCK_CACHED or BLOCK_FREE, as `Backend.block_owners` gives it."""
        owners = np.full(len(self.holders), BLOCK_FREE)
        for block_id, holders in enumerate(self.holders):
            if len(holders) > 1:
                owners[block_id] = BLOCK_SHARED
            elif holders:
                owners[block_id] = rows.get(next(iter(holders)), BLOCK_FREE)
            elif self.findable[block_id]:
                owners[block_id] = BLOCK_CACHED
        return owners

    def blocks_of(self, request_id: str) -> list[int]:
        return [block_id for block_id, holders in enumerate(self.holders) if request_id in holders]
