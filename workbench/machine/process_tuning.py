"""Process settings for serving thousands of streams from one Python process.

Open files: each HTTP stream holds one file descriptor, and a desktop's default soft limit (often
1,024) is below what thousands of in-flight streams need. As vLLM's server does, the soft limit is
raised to the hard limit, which needs no privileges.

The garbage collector: after start-up the process holds hundreds of thousands of long-lived
objects (torch, Qt, the model, the tokenizer), and every full collection walks them all, a pause
that stalls every thread, the window's included (docs/measurements.md, "Figures behind the
code"). As vLLM does after its engine starts, they are frozen out of the collector's reach once
loading is done.

OpenMP on the window's GUI thread: torch's CPU operators run on libgomp's thread teams, one team
per thread that starts parallel work. Once libgomp manages more threads than the machine has
cores, it stops spin-waiting between parallel regions, for every team; the engine's step (on the
window's worker thread) then waits for its helper threads to wake at each region. The GUI thread
starts no team of its own.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import resource
from pathlib import Path


def allow_open_files(wanted: int = 65_536) -> int:
    """Raise this process's soft limit on open files towards `wanted` (up to the hard limit);
    returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def freeze_loaded_heap() -> None:
    """Exempt everything alive now from future collections; call it when loading is done. What
    an earlier freeze kept is let go first, so a reload does not keep the last model's garbage,
    and the memory freed is handed back to the system. At exit the heap is unfrozen, so that
    shutdown frees it (else Triton's bindings report their functions as leaked)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    atexit.unregister(gc.unfreeze)
    atexit.register(gc.unfreeze)
    return_freed_memory()


def return_freed_memory() -> None:
    """Hand the memory freed since the last call back to the system. glibc keeps freed blocks in
    its arenas for reuse, and a replaced engine's tensors and quantization scratch stayed there:
    reloading the bundled model took the process from 2.63 to 4.25 GiB in 4 loads; with a trim
    after each, 2.60 to 2.65 GiB in 5 (2-core VM, 2026-12-01). Nothing to do on other C libraries."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def no_parallel_work_on_this_thread() -> None:
    """Torch operators called on this thread from now on run on it alone: it starts no OpenMP
    team. For the window's GUI thread (module docstring): one parallel torch operator there took
    the window's engine from 616-637 to 408-429 output tok/s (docs/measurements.md, "Engine output
    tokens/s with the window attached"). Nothing to do where torch does not use libgomp."""
    import torch

    torch.get_num_threads()  # torch sets a thread's OpenMP thread count at its first use there: first
    libgomp = _loaded_library("libgomp")
    if libgomp is not None:
        ctypes.CDLL(libgomp).omp_set_num_threads(1)  # this thread's setting only (OpenMP's nthreads-var)


def _loaded_library(name: str) -> str | None:
    """The path of the shared library whose file name starts with `name`, as this process has
    loaded it (torch's wheel bundles its own libgomp under a hashed name)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux
        return None
    for line in maps.splitlines():
        path = line.rpartition(" ")[2]
        if Path(path).name.startswith(name):
            return path
    return None
