"""Compiled decode graphs kept across runs, and how long the last compile of each took.

Inductor caches what it compiles (its FX graph and AOT caches, the C++ kernels and wrapper) under
`$TORCHINDUCTOR_CACHE_DIR`, by default a folder in /tmp that a reboot empties. A full cache cuts
a compile of SmolLM2's graphs from minutes to seconds (docs/compiled-decode.md, "Kept across
runs"), so the workbench keeps them in its own cache folder unless the variable was set.

The duration of the last compile of a graph (keyed by the model's shapes, its modules' types and
the KV dtype: what decides the generated code) lets the window and `/health` say how much of a
warm-up is left.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.platform.cache_directory import cache_directory

INDUCTOR_CACHE_ENVIRONMENT = "TORCHINDUCTOR_CACHE_DIR"


def use_persistent_compile_cache() -> Path:
    """Point inductor at the workbench's cache folder unless the user chose one; return the folder."""
    folder = os.environ.setdefault(INDUCTOR_CACHE_ENVIRONMENT, str(cache_directory() / "torch-compile"))
    return Path(folder)


def graph_key(model: torch.nn.Module, kv_dtype: torch.dtype, sizes: tuple[int, ...]) -> str:
    """What decides a decode graph's generated code, hashed: the model's configuration, the types of
    its modules (its quantization), the KV dtype and the batch sizes compiled."""
    module_types = sorted({type(module).__qualname__ for module in model.modules()})
    text = repr((getattr(model, "config", None), module_types, str(kv_dtype), sizes, torch.__version__))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _durations_file() -> Path:
    return cache_directory() / "compile-durations.json"


def last_duration_s(key: str) -> float | None:
    """How long the last successful compile of this graph took on this machine, if one did."""
    try:
        return float(json.loads(_durations_file().read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none recorded yet, or a file this version cannot read: the next compile rewrites it


def record_duration(key: str, seconds: float) -> None:
    path = _durations_file()
    try:
        durations = json.loads(path.read_text())
        if not isinstance(durations, dict):
            durations = {}
    except (OSError, ValueError):
        durations = {}
    durations[key] = round(seconds, 1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(durations, indent=1, sort_keys=True))
        os.replace(partial, path)
    except OSError:
        pass  # a read-only cache costs only the next warm-up's estimate


@dataclass(frozen=True)
class CompileProgress:
    """A compile under way: seconds since it began, and the last compile's duration if known."""

    elapsed_s: float
    expected_s: float | None

    def time_so_far(self) -> str:
        """E.g. "12 s of about 31 s", "12 s so far" (a first compile: nothing to go by)."""
        if self.expected_s is not None and self.elapsed_s <= self.expected_s:
            return f"{self.elapsed_s:.0f} s of about {self.expected_s:.0f} s"
        return f"{self.elapsed_s:.0f} s so far"

    def describe(self) -> str:
        """E.g. "compiling the decode and prefill graphs: 12 s of about 31 s" — for the window and /health."""
        what = "compiling the decode and prefill graphs"
        if self.expected_s is None:
            return (
                f"{what}: {self.elapsed_s:.0f} s so far "
                "(the first compile on this machine: a few minutes; later ones reuse its cache)"
            )
        if self.elapsed_s <= self.expected_s:
            return f"{what}: {self.elapsed_s:.0f} s of about {self.expected_s:.0f} s"
        return f"{what}: {self.elapsed_s:.0f} s (the last one here took {self.expected_s:.0f} s)"


class CompileClock:
    """Times one compile of a graph and records its duration when it succeeds."""

    def __init__(self, key: str):
        self.key = key
        self.expected_s = last_duration_s(key)
        self.started: float | None = None

    def start(self) -> None:
        self.started = time.monotonic()

    def progress(self) -> CompileProgress:
        return CompileProgress(time.monotonic() - (self.started or time.monotonic()), self.expected_s)

    def finished(self) -> None:
        record_duration(self.key, time.monotonic() - (self.started or time.monotonic()))


def with_own_code(function):
    """A function or bound method rebuilt around a copy of its code object (same bytecode, new
    identity). torch keeps compiled graphs per code object: a copy per engine keeps another
    engine's model (another quantization, other module types) from reusing this one's graphs."""
    plain = getattr(function, "__func__", function)
    copy = types.FunctionType(
        plain.__code__.replace(), plain.__globals__, plain.__name__, plain.__defaults__, plain.__closure__
    )
    owner = getattr(function, "__self__", None)
    return copy if owner is None else types.MethodType(copy, owner)


class CompiledPart:
    """What each compiled part of a step (the decode graph, the prefill halves) keeps: its mode,
    "compiled" once usable, otherwise why that step runs eagerly, worded as users read it."""

    COMPILING = "eager (compiling in the background)"
    STOPPED = "eager (compile stopped)"
    COMPILED = "compiled"

    def __init__(self, step: str):
        self.step = step  # what a fallback's warning names: "decode step", "prefill step"
        self.mode = self.COMPILING

    @property
    def usable(self) -> bool:
        return self.mode == self.COMPILED

    def fall_back(self, exc: Exception) -> None:
        """Eager from now on, saying why (called from the part's compile or call)."""
        self.mode = f"eager (compile failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        warnings.warn(f"{self.step}: {self.mode}; continuing without compilation", RuntimeWarning, stacklevel=3)
