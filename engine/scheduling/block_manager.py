"""The KV cache's bookkeeping: which blocks are free, who holds which, which hold reusable prefixes.

A sequence holds one block table per KV group (engine/model_spec/kv_layout.py), all drawn from one pool and
all indexed alike: entry i covers positions i * block_size onwards. A sliding-window group's
entries for positions no query can see any more are released after each step (`slide_window`)
and become `null_block`, so such a sequence holds a window's worth of blocks in that group
whatever its length.

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
from dataclasses import dataclass

from engine.requests.sequence import Sequence

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
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        windows: tuple[int | None, ...] = (None,),
    ):
        """`windows`: one entry per KV group, its sliding window or None (KvLayout.windows)."""
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.windows = windows
        self.blocks = [Block(block_id) for block_id in range(num_blocks)]
        # A released window entry points here: the executor's scratch block (it allocates one past
        # num_blocks), never written through a table and read only under a mask.
        self.null_block = num_blocks
        # Per block, 1 when a sliding-window group holds (or last held) it: the block map reads it whole.
        self.window_flags = bytearray(num_blocks)
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._block_by_hash: dict[bytes, int] = {}
        self._num_cached_free = 0  # free blocks still holding a findable prefix
        self.prefix_hit_tokens = 0
        self.prefix_query_tokens = 0

    @property
    def num_groups(self) -> int:
        return len(self.windows)

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

    def is_windowed(self, block_id: int) -> bool:
        """Whether a sliding-window group holds (or last held) the block."""
        return bool(self.window_flags[block_id])

    def held_block_ids(self, seq: Sequence) -> list[int]:
        """Every block the sequence holds, in all its groups (released window entries left out)."""
        return [block_id for table in seq.block_tables for block_id in table if block_id != self.null_block]

    def blocks_to_cover(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _first_visible_block(self, window: int, position: int) -> int:
        """The first block a query at `position` reads in a group with this window."""
        return max(position - window + 1, 0) // self.block_size

    def find_cached_prefix(self, seq: Sequence) -> CachedPrefix:
        """The longest start of the sequence's tokens whose K/V every group still has: all of it in
        a full-attention group, the last window's blocks in a sliding-window group.

        The last token is always left to compute, since its logits are needed to sample.
        """
        if not self.enable_prefix_caching:
            return CachedPrefix(0, [], [[] for _ in self.windows])
        full_blocks = (seq.num_tokens - 1) // self.block_size
        chain: list[bytes] = []
        parent_hash = ROOT_HASH
        found: list[list[int | None]] = [[] for _ in self.windows]  # per group, a block id or None per block
        for index in range(full_blocks):
            tokens = tuple(seq.token_ids[index * self.block_size : (index + 1) * self.block_size])
            parent_hash = block_hash(parent_hash, tokens)
            ids = [self._block_by_hash.get(_key(group, parent_hash)) for group in range(self.num_groups)]
            if any(block_id is None for block_id, window in zip(ids, self.windows) if window is None):
                break  # a full-attention group needs every block of the prefix
            chain.append(parent_hash)
            for group_found, block_id in zip(found, ids):
                group_found.append(block_id)
        length = len(chain)
        while length and not all(
            None not in found[group][self._first_visible_block(window, length * self.block_size) : length]
            for group, window in enumerate(self.windows)
            if window is not None
        ):
            length -= 1
        tables = []
        for group, window in enumerate(self.windows):
            first = 0 if window is None else self._first_visible_block(window, length * self.block_size)
            tables.append([None] * first + found[group][first:length])
        return CachedPrefix(length, chain[:length], tables)

    def receive_prefix(self, token_ids: list[int]) -> int:
        """Take in K/V computed elsewhere (a prefill instance's, sent over the link) for the full
        blocks of `token_ids`, as free blocks a prompt starting with those tokens finds by prefix
        hash: how vLLM's KV connectors hand a decode instance its external tokens, which admission
        then counts as computed. Blocks already findable stay; new ones are taken off the front of
        the free list (overwriting its oldest cached prefix) and go to its back, to be overwritten
        last. Takes at most the blocks free now: what does not fit is recomputed on admission.
        Returns how many blocks it wrote."""
        if not self.enable_prefix_caching:
            return 0
        full_blocks = len(token_ids) // self.block_size
        room = self.num_free_blocks  # blocks popped are ones free now, never one written here
        written = 0
        parent_hash = ROOT_HASH
        for index in range(full_blocks):
            parent_hash = block_hash(
                parent_hash, tuple(token_ids[index * self.block_size : (index + 1) * self.block_size])
            )
            for group, window in enumerate(self.windows):
                if window is not None and index < self._first_visible_block(window, full_blocks * self.block_size):
                    continue  # a sliding-window group keeps only what the next query reads
                key = _key(group, parent_hash)
                if key in self._block_by_hash:
                    continue
                if written == room:
                    return written
                block = self._overwrite_oldest_free(window)
                block.prefix_hash = key
                self._block_by_hash[key] = block.block_id
                self._free[block.block_id] = None
                self._num_cached_free += 1
                written += 1
        return written

    def new_blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks off the free list the sequence needs for its next num_new_tokens tokens: as many
        in every group (each table covers every position, released window entries included)."""
        held = len(seq.block_tables[0]) if seq.block_tables else 0
        return self.num_groups * max(0, self.blocks_to_cover(seq.num_computed_tokens + num_new_tokens) - held)

    def can_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.new_blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def can_admit(self, hit: CachedPrefix, num_new_tokens: int) -> bool:
        """Whether a waiting sequence with this prefix hit can start with num_new_tokens tokens."""
        # Cached blocks that nobody holds sit in the free list; taking them shrinks it.
        cached_free = sum(1 for block_id in hit.block_ids() if self.blocks[block_id].ref_count == 0)
        new_columns = self.blocks_to_cover(hit.num_blocks * self.block_size + num_new_tokens) - hit.num_blocks
        return self.num_groups * new_columns <= self.num_free_blocks - cached_free

    def admit(self, seq: Sequence, hit: CachedPrefix) -> list[int]:
        """Give a waiting sequence its cached prefix blocks and count the prefix-cache query;
        returns the ones that were free (cached-free) and leave the free list."""
        from_free = []
        seq.block_tables = [
            [self.null_block if block_id is None else block_id for block_id in table] for table in hit.tables
        ]
        for block_id in hit.block_ids():
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self._free[block_id]
                self._num_cached_free -= 1
                from_free.append(block_id)
            block.ref_count += 1
        seq.block_hashes = list(hit.chain)
        seq.num_computed_tokens = hit.num_blocks * self.block_size
        self.prefix_query_tokens += seq.num_tokens
        self.prefix_hit_tokens += seq.num_computed_tokens
        return from_free

    def grow(self, seq: Sequence, num_new_tokens: int) -> list[int]:
        """Append free blocks to every table so the next num_new_tokens tokens have slots; returns
        their ids."""
        if not seq.block_tables:
            seq.block_tables = [[] for _ in self.windows]
        allocated = []
        for _ in range(self.new_blocks_needed(seq, num_new_tokens) // self.num_groups):
            for window, table in zip(self.windows, seq.block_tables):
                block = self._overwrite_oldest_free(window)
                block.ref_count = 1
                table.append(block.block_id)
                allocated.append(block.block_id)
        return allocated

    def _overwrite_oldest_free(self, window: int | None) -> Block:
        """The free list's oldest block, taken off it for new content: its cached prefix, if
        any, is forgotten; it now belongs to a group with this window."""
        block_id, _ = self._free.popitem(last=False)
        block = self.blocks[block_id]
        if block.prefix_hash is not None:
            del self._block_by_hash[block.prefix_hash]
            self._num_cached_free -= 1
            block.prefix_hash = None
        self.window_flags[block_id] = window is not None
        return block

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
            for group, table in enumerate(seq.block_tables):
                if table[index] == self.null_block:  # left its window before it was complete
                    continue
                block, key = self.blocks[table[index]], _key(group, prefix_hash)
                # Another sequence may have computed the same prefix concurrently: the first block
                # stays the findable one, and only findable blocks carry a hash.
                if self._block_by_hash.setdefault(key, block.block_id) == block.block_id:
                    block.prefix_hash = key
                    registered.append(block.block_id)
            seq.block_hashes.append(prefix_hash)
        return registered

    def slide_window(self, seq: Sequence) -> tuple[list[int], list[int]]:
        """Release the sliding-window groups' blocks that no query of the sequence can see any more
        (its next query is at position num_computed_tokens). Returns the blocks it gave up and those
        that went back on the free list."""
        released, freed = [], []
        for window, table in zip(self.windows, seq.block_tables):
            if window is None:
                continue
            # Released entries form a prefix of the table: walk back from the first visible block.
            index = min(self._first_visible_block(window, seq.num_computed_tokens), len(table)) - 1
            while index >= 0 and table[index] != self.null_block:
                released.append(table[index])
                if self._release(table[index]):
                    freed.append(table[index])
                table[index] = self.null_block
                index -= 1
        return released, freed

    def release_tail(self, seq: Sequence) -> tuple[list[int], list[int]]:
        """Give back the blocks past those its tokens need (what rejected speculative proposals
        took). Returns the blocks it gave up and those that went back on the free list."""
        keep = self.blocks_to_cover(seq.num_tokens)
        released = [block_id for table in seq.block_tables for block_id in table[keep:]]
        for table in seq.block_tables:
            del table[keep:]
        freed = [block_id for block_id in reversed(released) if self._release(block_id)]
        return released, freed

    def _release(self, block_id: int) -> bool:
        """Drop one reference; True when the block went back on the free list."""
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count:
            return False
        self._free[block_id] = None
        self._num_cached_free += block.prefix_hash is not None
        return True

    def free(self, seq: Sequence) -> tuple[list[int], list[int]]:
        """Release the sequence's blocks; the tail goes to the free list first so it is reused
        first. Returns the blocks it held and those that went back on the free list."""
        released = self.held_block_ids(seq)
        freed = [block_id for block_id in reversed(released) if self._release(block_id)]
        seq.block_tables = []
        seq.block_hashes = []
        seq.num_computed_tokens = 0
        return released, freed


def _key(group: int, prefix_hash: bytes) -> bytes:
    """A block's key in the prefix index: the same tokens in two groups are two blocks."""
    return bytes((group,)) + prefix_hash


@dataclass
class CachedPrefix:
    """What `find_cached_prefix` found: the first `num_blocks` blocks' worth of tokens, with the
    blocks each group has for them (a window group only those its next query reads)."""

    num_blocks: int
    chain: list[bytes]  # the prefix hash of each of those blocks
    tables: list[list[int | None]]  # per group, indexed like a block table; None where not needed

    def block_ids(self) -> list[int]:
        return [block_id for table in self.tables for block_id in table if block_id is not None]
