"""Keep freed host memory for reuse instead of handing it back to the operating system.

A step on the CPU allocates activations of a few to tens of megabytes (a 2,048-token prefill's
gate and up projections alone: 2,048 x 3,072 float32, 25 MB) and frees them before the next
layer. glibc's malloc serves blocks that large with mmap and trims freed memory off its heap, so
each layer's new tensor page-faults and is zeroed again, page by page. Raising malloc's mmap and
trim thresholds keeps those blocks in the heap, where the next layer's tensors reuse them: a
2,048-token prefill of SmolLM2 went from 2.1 to 1.5 s (docs/measurements.md, "Prefill: memory
that stays mapped"). vLLM's CPU backend gets the same from preloading tcmalloc; this needs nothing
installed. Elsewhere than glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# mallopt's parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# The largest mmap threshold glibc accepts on 64-bit machines (HEAP_MAX_SIZE / 2): blocks up to
# this size come from the heap.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
# Free memory at the heap's top is handed back only beyond this much.
TRIM_THRESHOLD_BYTES = 1024 * 1024 * 1024


@functools.cache
def keep_freed_memory_for_reuse() -> bool:
    """Set glibc malloc's thresholds for this process (once); whether they were set."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return False  # not glibc: its mallopt, where there is one, takes other parameters
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
