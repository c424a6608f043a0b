"""Process settings for serving thousands of streams from one Python process.

Open files: each HTTP stream holds one file descriptor, and a desktop's default soft limit (often
1,024) is below what thousands of in-flight streams need. As vLLM's server does, the soft limit is
raised to the hard limit, which needs no privileges.

The garbage collector: after start-up the process holds hundreds of thousands of long-lived
objects (torch, Qt, the model, the tokenizer), and every full collection walks them all, a pause
that stalls every thread, the window's included (docs/measurements.md, "Figures behind the
code"). As vLLM does after its engine starts, they are frozen out of the collector's reach once
loading is done.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import resource


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
