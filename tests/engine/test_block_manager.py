"""Block manager invariants: reference counts, the free list, prefix hashes, under random use."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.block_manager import BlockManager
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


def make_sequence(tokens, index=0):
    return Sequence(str(index), tokens, SamplingParams(), 0.0, arrival_index=index, seed=0)


def fill(manager, seq):
    """Admit with whatever prefix is cached and compute the rest, as the scheduler would."""
    manager.admit(seq, manager.find_cached_prefix(seq))
    manager.grow(seq, seq.num_uncomputed_tokens)
    seq.num_computed_tokens = seq.num_tokens
    manager.register_full_blocks(seq)


def test_shared_prefix_blocks_are_reused_and_counted():
    manager = BlockManager(num_blocks=16, block_size=4)
    first = make_sequence(list(range(10)), 0)  # blocks [0-3] [4-7] [8-9]
    fill(manager, first)
    second = make_sequence(list(range(8)) + [50, 51, 52], 1)
    cached = manager.find_cached_prefix(second)
    assert cached == first.block_table[:2]
    fill(manager, second)
    assert second.block_table[:2] == first.block_table[:2]
    assert manager.blocks[first.block_table[0]].ref_count == 2
    assert manager.prefix_hit_tokens == 8 and manager.prefix_query_tokens == 10 + 11
    assert manager.num_used_blocks == 3 + 1


def test_the_last_token_is_never_served_from_the_cache():
    manager = BlockManager(num_blocks=8, block_size=4)
    fill(manager, make_sequence(list(range(8)), 0))
    again = make_sequence(list(range(8)), 1)
    assert len(manager.find_cached_prefix(again)) == 1  # the second block holds the last token


def test_freed_blocks_stay_findable_until_reused():
    manager = BlockManager(num_blocks=4, block_size=4)
    seq = make_sequence(list(range(8)), 0)
    fill(manager, seq)
    manager.free(seq)
    assert manager.num_used_blocks == 0 and manager.num_cached_free_blocks == 2
    assert len(manager.find_cached_prefix(make_sequence(list(range(9)), 1))) == 2
    hog = make_sequence([99] * 16, 2)  # takes every block, overwriting the cached ones
    manager.grow(hog, 16)
    assert manager.num_cached_free_blocks == 0
    assert manager.find_cached_prefix(make_sequence(list(range(9)), 3)) == []


def test_a_block_is_found_only_after_the_same_chain_of_blocks():
    manager = BlockManager(num_blocks=16, block_size=2)
    fill(manager, make_sequence([1, 2, 3, 4, 5], 0))  # blocks [1 2] [3 4]
    # [3 4] at position 0, and [3 4] after another first block: the same tokens, another chain.
    assert manager.find_cached_prefix(make_sequence([3, 4, 9], 1)) == []
    assert manager.find_cached_prefix(make_sequence([7, 8, 3, 4, 9], 2)) == []
    assert len(manager.find_cached_prefix(make_sequence([1, 2, 3, 4, 9], 3))) == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(st.integers(0, 3), min_size=1, max_size=23)),
        min_size=1,
        max_size=30,
    )
)
def test_reference_counts_and_free_list_stay_consistent(operations):
    manager = BlockManager(num_blocks=24, block_size=4)
    live: list[Sequence] = []
    for index, (release, tokens) in enumerate(operations):
        if release and live:
            manager.free(live.pop(0))
        else:
            seq = make_sequence(tokens, index)
            cached = manager.find_cached_prefix(seq)
            cached_free = sum(1 for block_id in cached if manager.blocks[block_id].ref_count == 0)
            needed = manager.blocks_to_cover(seq.num_tokens) - len(cached)
            if needed <= manager.num_free_blocks - cached_free:
                fill(manager, seq)
                live.append(seq)
        holders = {}
        for seq in live:
            assert len(seq.block_table) == manager.blocks_to_cover(seq.num_tokens)
            for block_id in seq.block_table:
                holders[block_id] = holders.get(block_id, 0) + 1
        for block in manager.blocks:
            assert block.ref_count == holders.get(block.block_id, 0)
        assert manager.num_used_blocks == len(holders)
        cached_free = [block for block in manager.blocks if block.ref_count == 0 and block.prefix_hash is not None]
        assert manager.num_cached_free_blocks == len(cached_free)
        # Findable blocks hold exactly the tokens of every holder; only findable blocks are shared.
        for seq in live:
            for position, block_id in enumerate(seq.block_table[: seq.num_tokens // 4]):
                block = manager.blocks[block_id]
                assert block.ref_count == 1 or block.prefix_hash is not None
                if block.prefix_hash is not None:
                    assert block.prefix_hash == seq.block_hashes[position]
    for seq in live:
        manager.free(seq)
    assert manager.num_used_blocks == 0 and manager.num_free_blocks == 24
