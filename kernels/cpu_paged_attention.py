"""Decode attention reading the paged KV cache in place on the CPU: a C++ operator
(cpu_paged_attention.cpp), built once per machine with torch's extension builder and kept in its
cache (`$TORCH_EXTENSIONS_DIR`, default ~/.cache/torch_extensions).

The torch reference (kernels/paged_attention.py) gathers every sequence's blocks into a padded
tensor and then attends over it: three passes over the context at copy bandwidth, and PyTorch's
CPU attention for a few query rows per head reads K/V at about 1-2 GB/s (docs/measurements.md,
curve b). This operator reads each visible key and value once, for all query heads of a KV head
together. It is registered as `torch.ops.workbench.paged_decode_attention(query, key_cache,
value_cache, block_tables, context_lens, scale, window)` (window 0: full attention; otherwise the
contract of kernels.paged_attention.paged_decode_attention) with a fake implementation, so that
the compiled decode graph calls it as one opaque operator.

If the build fails (no C++ compiler), `available()` is False and the torch path is used; the
reason is kept in `unavailable_reason` and said once as a warning.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import torch

_SOURCE = Path(__file__).with_name("cpu_paged_attention.cpp")
_state: dict = {}  # "loaded": bool, "reason": str


def _machine_tag() -> str:
    """The build uses -march=native: a build directory shared between different CPUs (a network
    home) must not hand one machine's instructions to another."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = ""
    return hashlib.sha256(flags.encode()).hexdigest()[:8]


def available() -> bool:
    """Build (the first time on this machine, 10-20 s) or load the operator; False if it cannot be."""
    if "loaded" not in _state:
        try:
            from torch.utils.cpp_extension import load

            load(
                name=f"workbench_paged_attention_{_machine_tag()}",
                sources=[str(_SOURCE)],
                extra_cflags=["-O3", "-march=native", "-fopenmp"],
                extra_ldflags=["-fopenmp"],
                is_python_module=False,
                verbose=False,
            )
            torch.library.register_fake("workbench::paged_decode_attention")(_fake)
            _state.update(loaded=True, reason="")
        except Exception as error:  # a missing or failing compiler: keep serving on the torch path
            _state.update(loaded=False, reason=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
            warnings.warn(
                f"the CPU paged-attention operator could not be built ({_state['reason']}); "
                "decode attention gathers K/V instead (slower at long contexts)",
                RuntimeWarning,
                stacklevel=2,
            )
    return _state["loaded"]


def unavailable_reason() -> str:
    return _state.get("reason", "")


def _fake(query, key_cache, value_cache, block_tables, context_lens, scale, window):
    return torch.empty_like(query)
