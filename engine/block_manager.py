"""The KV cache's bookkeeping: which blocks are free, who holds which, which hold reusable prefixes.

Blocks are reference counted so sequences can share a common prefix. A full block is known by the
SHA-256 of (previous block's hash, its token ids), so its key stands for the whole chain of tokens
before it, and a collision is as unlikely as in vLLM, which hashes the same way; a new sequence
whose prompt starts with the same blocks reuses them instead of recomputing (prefix caching). A
freed block keeps its content and hash until it is handed out again, so a popular prefix survives
while the cache has room; the free list is FIFO, so the least recently freed block is overwritten
first.

Knows nothing of tensors: it hands out block ids; the executor owns the memory.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

from engine.sequence import Sequence

ROOT_HASH = b""  # the "parent" of a sequence's first block


def block_hash(parent_hash: bytes, token_ids: tuple[int, ...]) -> bytes:
    """The key of a full block: it changes if any token in it or in any block before it does."""
    return hashlib.sha256(parent_hash + array("q", token_ids).tobytes()).digest()


class Block:
    __slots__ = ("block_id", "ref_count", "prefix_hash")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.prefix_hash: bytes | None = None


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(block_id) for block_id in range(num_blocks)]
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._block_by_hash: dict[bytes, int] = {}
        self._num_cached_free = 0  # free blocks still holding a findable prefix
        self.prefix_hit_tokens = 0
        self.prefix_query_tokens = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return len(self.blocks) - len(self._free)

    @property
    def num_cached_free_blocks(self) -> int:
        """Free blocks whose content is still findable by prefix hash (reused on a hit, else
        overwritten first-in first-out). They count as free, not used, as in vLLM's usage figure."""
        return self._num_cached_free

    def is_shared(self, block_id: int) -> bool:
        """Held by more than one sequence (a shared prefix)."""
        return self.blocks[block_id].ref_count > 1

    def cached_free_block_ids(self) -> list[int]:
        """Free blocks that still hold a reusable prefix."""
        return [block.block_id for block in self.blocks if block.ref_count == 0 and block.prefix_hash is not None]

    def blocks_to_cover(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def find_cached_prefix(self, seq: Sequence) -> list[int]:
        """Ids of cached blocks matching the start of the sequence's tokens.

        The last token is always left to compute, since its logits are needed to sample.
        """
        if not self.enable_prefix_caching:
            return []
        found: list[int] = []
        parent_hash = ROOT_HASH
        for index in range((seq.num_tokens - 1) // self.block_size):
            tokens = tuple(seq.token_ids[index * self.block_size : (index + 1) * self.block_size])
            parent_hash = block_hash(parent_hash, tokens)
            block_id = self._block_by_hash.get(parent_hash)
            if block_id is None:
                break
            found.append(block_id)
        return found

    def new_blocks_needed(self, seq: Sequence, num_new_tokens: int, num_cached_blocks: int = 0) -> int:
        held = len(seq.block_table) + num_cached_blocks
        return max(0, self.blocks_to_cover(seq.num_computed_tokens + num_new_tokens) - held)

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.new_blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def admit(self, seq: Sequence, cached_block_ids: list[int]) -> list[int]:
        """Give a waiting sequence its cached prefix blocks and count the prefix-cache query;
        returns the ones that were free (cached-free) and leave the free list."""
        from_free = []
        for block_id in cached_block_ids:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self._free[block_id]
                self._num_cached_free -= 1
                from_free.append(block_id)
            block.ref_count += 1
            seq.block_table.append(block_id)
            seq.block_hashes.append(block.prefix_hash)
        seq.num_computed_tokens = len(cached_block_ids) * self.block_size
        self.prefix_query_tokens += seq.num_tokens
        self.prefix_hit_tokens += seq.num_computed_tokens
        return from_free

    def grow(self, seq: Sequence, num_new_tokens: int) -> list[int]:
        """Append free blocks so the next num_new_tokens tokens have slots; returns their ids."""
        allocated = []
        for _ in range(self.new_blocks_needed(seq, num_new_tokens)):
            block_id, _ = self._free.popitem(last=False)
            block = self.blocks[block_id]
            if block.prefix_hash is not None:
                del self._block_by_hash[block.prefix_hash]
                self._num_cached_free -= 1
            block.prefix_hash = None
            block.ref_count = 1
            seq.block_table.append(block_id)
            allocated.append(block_id)
        return allocated

    def register_full_blocks(self, seq: Sequence) -> list[int]:
        """Make the sequence's newly completed blocks findable by later prompts; returns the ids
        that became findable."""
        if not self.enable_prefix_caching:
            return []
        registered = []
        num_full = seq.num_computed_tokens // self.block_size
        while len(seq.block_hashes) < num_full:
            index = len(seq.block_hashes)
            tokens = tuple(seq.token_ids[index * self.block_size : (index + 1) * self.block_size])
            parent_hash = seq.block_hashes[-1] if seq.block_hashes else ROOT_HASH
            prefix_hash = block_hash(parent_hash, tokens)
            block = self.blocks[seq.block_table[index]]
            # Another sequence may have computed the same prefix concurrently: the first block
            # stays the findable one, and only findable blocks carry a hash.
            if self._block_by_hash.setdefault(prefix_hash, block.block_id) == block.block_id:
                block.prefix_hash = prefix_hash
                registered.append(block.block_id)
            seq.block_hashes.append(prefix_hash)
        return registered

    def free(self, seq: Sequence) -> tuple[list[int], list[int]]:
        """Release the sequence's blocks; the tail goes to the free list first so it is reused
        first. Returns the blocks it held and those that went back on the free list."""
        released, freed = list(seq.block_table), []
        for block_id in reversed(released):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[block_id] = None
                self._num_cached_free += block.prefix_hash is not None
                freed.append(block_id)
        seq.block_table.clear()
        seq.block_hashes.clear()
        seq.num_computed_tokens = 0
        return released, freed

    def slot(self, seq: Sequence, position: int) -> int:
        return seq.block_table[position // self.block_size] * self.block_size + position % self.block_size
