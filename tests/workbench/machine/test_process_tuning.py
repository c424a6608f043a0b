"""Thousands of streams need thousands of file descriptors: the soft limit is raised for them."""

from __future__ import annotations

import resource

from workbench.machine.process_tuning import allow_open_files, freeze_loaded_heap


def test_a_low_soft_limit_is_raised_up_to_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert allow_open_files(4096) == resource.getrlimit(resource.RLIMIT_NOFILE)[0] == min(4096, hard)
        assert allow_open_files(512) == min(4096, hard)  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_frozen_heap_leaves_full_collections_only_what_came_after():
    import gc

    class Node:
        pass

    try:
        kept = [Node() for _ in range(50_000)]
        freeze_loaded_heap()
        assert gc.get_freeze_count() >= len(kept)
        cycle = Node()
        cycle.self = cycle
        del cycle
        assert gc.collect() >= 1  # garbage made after the freeze is still collected
        freeze_loaded_heap()  # a reload: what the first freeze kept and is now garbage goes
        kept_count = gc.get_freeze_count()
        del kept
        freeze_loaded_heap()
        # The 50,000 nodes went; a few objects the interpreter made meanwhile may have come (the
        # full suite once saw 49,999), so the margin is a thousand, not zero.
        assert gc.get_freeze_count() <= kept_count - 49_000
    finally:
        gc.unfreeze()
