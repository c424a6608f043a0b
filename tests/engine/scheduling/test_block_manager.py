"""Block manager invariants: reference counts, the free list, prefix hashes, under random use."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.requests.sampling_params import SamplingParams
from engine.requests.sequence import Sequence
from engine.scheduling.block_manager import BlockManager


def make_sequence(tokens, index=0):
    return Sequence(str(index), tokens, SamplingParams(), 0.0, arrival_index=index, seed=0)


def fill(manager, seq, chunk=None) -> bool:
    """Admit with whatever prefix is cached and compute the rest in steps of `chunk` tokens, as the
    scheduler would (growing, then registering full blocks and sliding the window after each);
    False, with everything released, when the cache runs out."""
    manager.admit(seq, manager.find_cached_prefix(seq))
    while seq.num_uncomputed_tokens:
        count = min(chunk or seq.num_uncomputed_tokens, seq.num_uncomputed_tokens)
        if not manager.can_grow(seq, count):
            manager.free(seq)
            return False
        manager.grow(seq, count)
        seq.num_computed_tokens += count
        manager.register_full_blocks(seq)
        manager.slide_window(seq)
    return True


def test_shared_prefix_blocks_are_reused_and_counted():
    manager = BlockManager(num_blocks=16, block_size=4)
    first = make_sequence(list(range(10)), 0)  # blocks [0-3] [4-7] [8-9]
    fill(manager, first)
    second = make_sequence(list(range(8)) + [50, 51, 52], 1)
    cached = manager.find_cached_prefix(second)
    assert cached.block_ids() == first.block_tables[0][:2]
    fill(manager, second)
    assert second.block_tables[0][:2] == first.block_tables[0][:2]
    assert manager.blocks[first.block_tables[0][0]].ref_count == 2
    assert manager.prefix_hit_tokens == 8 and manager.prefix_query_tokens == 10 + 11
    assert manager.num_used_blocks == 3 + 1


def test_the_last_token_is_never_served_from_the_cache():
    manager = BlockManager(num_blocks=8, block_size=4)
    fill(manager, make_sequence(list(range(8)), 0))
    again = make_sequence(list(range(8)), 1)
    assert manager.find_cached_prefix(again).num_blocks == 1  # the second block holds the last token


def test_freed_blocks_stay_findable_until_reused():
    manager = BlockManager(num_blocks=4, block_size=4)
    seq = make_sequence(list(range(8)), 0)
    fill(manager, seq)
    manager.free(seq)
    assert manager.num_used_blocks == 0 and manager.num_cached_free_blocks == 2
    assert manager.find_cached_prefix(make_sequence(list(range(9)), 1)).num_blocks == 2
    hog = make_sequence([99] * 16, 2)  # takes every block, overwriting the cached ones
    manager.grow(hog, 16)
    assert manager.num_cached_free_blocks == 0
    assert manager.find_cached_prefix(make_sequence(list(range(9)), 3)).num_blocks == 0


def test_a_block_is_found_only_after_the_same_chain_of_blocks():
    manager = BlockManager(num_blocks=16, block_size=2)
    fill(manager, make_sequence([1, 2, 3, 4, 5], 0))  # blocks [1 2] [3 4]
    # [3 4] at position 0, and [3 4] after another first block: the same tokens, another chain.
    assert manager.find_cached_prefix(make_sequence([3, 4, 9], 1)).num_blocks == 0
    assert manager.find_cached_prefix(make_sequence([7, 8, 3, 4, 9], 2)).num_blocks == 0
    assert manager.find_cached_prefix(make_sequence([1, 2, 3, 4, 9], 3)).num_blocks == 2


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([(None,), (None, 6), (None, 9, 9), (5,)]),  # KV groups: full, windows of 6, 9, 5 tokens
    st.integers(1, 9),  # tokens computed per step
    st.lists(
        st.tuples(st.sampled_from(["add", "release", "receive"]), st.lists(st.integers(0, 3), min_size=1, max_size=23)),
        min_size=1,
        max_size=30,
    ),
)
def test_reference_counts_and_free_list_stay_consistent(windows, chunk, operations):
    manager = BlockManager(num_blocks=48, block_size=4, windows=windows)
    live: list[Sequence] = []
    for index, (kind, tokens) in enumerate(operations):
        if kind == "release" and live:
            manager.free(live.pop(0))
        elif kind == "receive":  # K/V sent by a prefill instance: findable, free, no holder
            free = manager.num_free_blocks
            manager.receive_prefix(tokens)
            assert manager.num_free_blocks == free
            if len(tokens) // 4 * len(windows) <= free:  # room for all of it: a prompt starting so finds it
                assert manager.find_cached_prefix(make_sequence(tokens + [0])).num_blocks == len(tokens) // 4
        else:
            seq = make_sequence(tokens, index)
            hit = manager.find_cached_prefix(seq)
            if manager.can_admit(hit, seq.num_tokens - hit.num_blocks * 4) and fill(manager, seq, chunk):
                live.append(seq)
        holders = {}
        for seq in live:
            for window, table in zip(windows, seq.block_tables):
                assert len(table) == manager.blocks_to_cover(seq.num_tokens)
                held = [block_id for block_id in table if block_id != manager.null_block]
                # A window group holds exactly the blocks its next query can read, at its end.
                visible = manager.blocks_to_cover(seq.num_tokens) - max(seq.num_tokens - (window or 10**9) + 1, 0) // 4
                assert held == table[len(table) - min(visible, len(table)) :]
                for block_id in held:
                    holders[block_id] = holders.get(block_id, 0) + 1
        for block in manager.blocks:
            assert block.ref_count == holders.get(block.block_id, 0)
        assert manager.num_used_blocks == len(holders)
        cached_free = [block for block in manager.blocks if block.ref_count == 0 and block.prefix_hash is not None]
        assert manager.num_cached_free_blocks == len(cached_free)
        assert {block_id: key for key, block_id in manager._block_by_hash.items()} == {
            block.block_id: block.prefix_hash for block in manager.blocks if block.prefix_hash is not None
        }
        # Findable blocks hold exactly the tokens of every holder; only findable blocks are shared.
        for seq in live:
            for group, table in enumerate(seq.block_tables):
                for position, block_id in enumerate(table[: seq.num_tokens // 4]):
                    if block_id == manager.null_block:
                        continue
                    block = manager.blocks[block_id]
                    assert block.ref_count == 1 or block.prefix_hash is not None
                    if block.prefix_hash is not None:
                        assert block.prefix_hash == bytes((group,)) + seq.block_hashes[position]
    for seq in live:
        manager.free(seq)
    assert manager.num_used_blocks == 0 and manager.num_free_blocks == 48


def test_a_window_group_holds_only_the_window_and_its_blocks_stay_findable():
    # Blocks of 4 tokens; a full-attention group and a group with an 8-token window.
    manager = BlockManager(num_blocks=64, block_size=4, windows=(None, 8))
    long = make_sequence(list(range(40)), 0)
    assert fill(manager, long, chunk=4)
    full, window = long.block_tables
    assert len(full) == 10 and full.count(manager.null_block) == 0
    # The next query (position 40) sees 33..40: blocks 8 and 9 (positions 32..39) stay.
    assert window[:8] == [manager.null_block] * 8 and manager.null_block not in window[8:]
    assert manager.num_used_blocks == 10 + 2
    # A prompt sharing the first 36 tokens finds them in both groups: the window group's blocks left
    # the window but went back on the free list still findable.
    again = make_sequence(list(range(36)) + [99, 98], 1)
    hit = manager.find_cached_prefix(again)
    assert hit.num_blocks == 9 and hit.tables[0] == full[:9]
    # Its next query (position 36) reads from position 29 on: block 7 onwards in the window group.
    assert hit.tables[1][:7] == [None] * 7 and None not in hit.tables[1][7:]
    # Once the window blocks are overwritten the prefix is only as long as the window group allows.
    manager.free(long)
    hog = make_sequence([7] * 4 * (manager.num_free_blocks - 10), 2)
    assert fill(manager, hog, chunk=4)  # takes the free list's head: the window group's early blocks
    assert manager.find_cached_prefix(again).num_blocks < 9
