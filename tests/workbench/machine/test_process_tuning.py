"""Thousands of streams need thousands of file descriptors: the soft limit is raised for them; a
frozen heap; the window's GUI thread starts no OpenMP team."""

from __future__ import annotations

import ctypes
import os
import resource
import threading
from pathlib import Path

import pytest

from workbench.machine.process_tuning import allow_open_files, freeze_loaded_heap, no_parallel_work_on_this_thread


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


def _threads_named(name: str) -> int:
    return sum(
        (task / "comm").read_text().strip() == name for task in Path("/proc/self/task").iterdir() if task.is_dir()
    )


def _threads_after_a_parallel_operator(name: str, first=lambda: None) -> int:
    """Threads named `name` once a new thread of that name has run `first` and then one parallel
    torch operator: the thread itself, and the OpenMP team it started (a team's threads take
    the name of the thread that starts them, and stay until it ends)."""
    import torch

    counted = []

    def body():
        ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: this thread's name
        first()
        torch.ones(1 << 22).add_(1).sum()
        counted.append(_threads_named(name))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return counted[0]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir() or (os.cpu_count() or 1) < 2, reason="Linux, 2+ cores")
def test_a_thread_told_so_runs_torch_operators_without_a_team_of_its_own():
    import torch

    assert _threads_after_a_parallel_operator("omp-team-probe") >= 2  # the control: a team is seen
    assert _threads_after_a_parallel_operator("omp-alone-probe", no_parallel_work_on_this_thread) == 1
    # With a thread count set for the process (serve's core sets one), torch applies it to each
    # thread at its first use there, which must not undo the helper's one thread.
    torch.set_num_threads(torch.get_num_threads())
    assert _threads_after_a_parallel_operator("omp-alone-set", no_parallel_work_on_this_thread) == 1
