"""Wall-clock timing of tensor work, synchronised with the GPU when there is one."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def timed_runs(function: Callable[[], object], repeats: int) -> list[float]:
    """Seconds per call for `repeats` calls, after one untimed warm-up call (caches, compilation)."""
    function()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        function()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times
