"""This project's C++ operators for the CPU, built once per machine with torch's extension builder
into one library kept in its cache (`$TORCH_EXTENSIONS_DIR`, default ~/.cache/torch_extensions):

- `torch.ops.workbench.paged_decode_attention(query, key_cache, value_cache, block_tables,
  context_lens, scale, window, key_scales=None, value_scales=None)` (cpu_paged_attention.cpp;
  the scales for an 8-bit cache, kernels/quantized_kv.py): decode attention reading the paged KV
  cache in place. The torch reference (kernels/paged_attention.py) gathers every sequence's blocks
  into a padded tensor and then attends over it: three passes over the context at copy bandwidth,
  and PyTorch's CPU attention for a few query rows per head reads K/V at about 1-2 GB/s
  (docs/measurements.md, curve b). This operator reads each visible key and value once, for all
  query heads of a KV head together (window 0: full attention; otherwise the contract of
  kernels.paged_attention.paged_decode_attention).
- `torch.ops.workbench.int4_product(x, codes, scales, minimums)` (cpu_int4_product.cpp): int4
  weights times activations quantized to int8 per 32 inputs, with VNNI dot products
  (kernels/quant_matmul.py packs the weights; the w4a8 method uses it).

Each has a fake implementation, so that a compiled graph calls it as one opaque operator.

If the build fails (no C++ compiler), `available()` is False and the torch paths are used; the
reason is kept in `unavailable_reason` and said once as a warning.

Building is guarded by a lock of our own, `build.flock` in the build directory: an flock, which
the kernel releases when its holder dies, so a process killed mid-build (SIGKILL, a timeout)
never blocks the next one. torch's own baton (a plain `lock` file it waits on forever) found while
we hold ours is a dead builder's, and is removed. A process that waits for our lock longer than
`LOCK_TIMEOUT_S` gives up with a message naming the file and takes the torch path; meanwhile it
says, once a second, what it waits for (`available(on_wait)`: the engine's load shows it), and an
exception from that callback (the window's Cancel load) ends the wait and is raised as it is, not
taken for a failed build. A build that is current (`built.json`: the sources' and flags' hash,
torch's version) is loaded directly, without either lock. A stop (SIGINT, SIGTERM: BaseExceptions)
is never taken for a failed build.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch

_SOURCES = [Path(__file__).with_name(name) for name in ("cpu_paged_attention.cpp", "cpu_int4_product.cpp")]
_CFLAGS = ["-O3", "-march=native", "-fopenmp"]
_LDFLAGS = ["-fopenmp"]
LOCK_TIMEOUT_S = 300.0  # many times a first build's time (docs/measurements.md); past it, the holder is stuck
_state: dict = {}  # "loaded": bool, "reason": str
# Told, about once a second while another process holds the build lock: the lock's path and the
# seconds waited so far.
WaitCallback = Callable[[Path, float], None]


class _WaitEnded(Exception):
    """The caller's `on_wait` raised (its exception is the cause): the wait ends, and the build is
    neither tried nor recorded as failed."""


def _machine_tag() -> str:
    """The build uses -march=native: a build directory shared between different CPUs (a network
    home) must not hand one machine's instructions to another; and a copy of the project at
    another path builds its own (ninja rebuilt the shared one for each copy in turn)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = ""
    return hashlib.sha256(f"{flags}\n{_SOURCES[0].resolve()}".encode()).hexdigest()[:8]


def _build_directory(name: str) -> Path:
    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()) / name


def _stamp() -> dict:
    """What a current build was made from."""
    sources = hashlib.sha256(b"".join(source.read_bytes() for source in _SOURCES)).hexdigest()
    return {"sources": sources, "cflags": _CFLAGS, "ldflags": _LDFLAGS, "torch": torch.__version__}


@contextmanager
def _build_lock(directory: Path, on_wait: WaitCallback):
    """Our flock on `directory/build.flock`, waited for at most LOCK_TIMEOUT_S (saying so through
    `on_wait`); a torch `lock` file found under it is a dead builder's and is removed."""
    path = directory / "build.flock"
    with path.open("a") as handle:
        started = time.monotonic()
        told = -1
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited > LOCK_TIMEOUT_S:
                    raise TimeoutError(
                        f"{path}: another process has held the build lock for over {LOCK_TIMEOUT_S:.0f} s"
                    ) from None
                if int(waited) > told:
                    told = int(waited)
                    try:
                        on_wait(path, waited)
                    except Exception as error:
                        raise _WaitEnded from error
                time.sleep(0.2)
        try:
            (directory / "lock").unlink(missing_ok=True)  # torch's baton: its owner is gone
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load(on_wait: WaitCallback) -> None:
    from torch.utils.cpp_extension import load

    name = f"workbench_cpu_operators_{_machine_tag()}"
    directory = _build_directory(name)
    directory.mkdir(parents=True, exist_ok=True)
    library, stamp_file = directory / f"{name}.so", directory / "built.json"
    current = library.exists() and stamp_file.exists() and json.loads(stamp_file.read_text()) == _stamp()
    if current:
        torch.ops.load_library(str(library))  # no lock, no baton: nothing is written
    else:
        with _build_lock(directory, on_wait):
            load(
                name=name,
                sources=[str(source) for source in _SOURCES],
                extra_cflags=_CFLAGS,
                extra_ldflags=_LDFLAGS,
                build_directory=str(directory),
                is_python_module=False,
                verbose=False,
            )
            stamp_file.write_text(json.dumps(_stamp()))
    torch.library.register_fake("workbench::paged_decode_attention")(_attention_fake)
    torch.library.register_fake("workbench::int4_product")(_int4_product_fake)


def available(on_wait: WaitCallback | None = None) -> bool:
    """Build (the first time on this machine, 10-20 s) or load the operators; False if they cannot be.
    `on_wait`: told while another process holds the build lock; what it raises ends the wait and
    comes out of this call (the next call tries again)."""
    if "loaded" not in _state:
        try:
            _load(on_wait or (lambda path, waited: None))
            _state.update(loaded=True, reason="")
        except _WaitEnded as ended:
            raise ended.__cause__ from None
        except Exception as error:  # a missing or failing compiler, a stuck lock: keep serving on the torch path
            _state.update(loaded=False, reason=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
            warnings.warn(
                f"the CPU operators could not be built ({_state['reason']}); decode attention gathers "
                "K/V instead (slower at long contexts) and w4a8 cannot run",
                RuntimeWarning,
                stacklevel=2,
            )
    return _state["loaded"]


def unavailable_reason() -> str:
    return _state.get("reason", "")


def _attention_fake(
    query, key_cache, value_cache, block_tables, context_lens, scale, window, key_scales=None, value_scales=None
):
    return torch.empty_like(query)


def _int4_product_fake(x, codes, scales, minimums):
    return x.new_empty(x.shape[0], codes.shape[0])
