"""The status line's view model: what the window says about the engine, without Qt.

A load's stages as one bar (each stage an equal share, the stages a configuration skips jumped
over), the loaded engine in words (model, dtype, device, quantization, how decode runs now), the
background compile while it runs, and what the line reads after a failure.
"""

from __future__ import annotations

from pathlib import Path

from engine.execution.compile_cache import CompileProgress
from workbench.backends.loader import EngineInfo, ServerInfo

# The stages a load reports, in order (engine/loading/, engine/llm_engine.py, the worker).
LOAD_STAGES = (
    "connect",
    "read file",
    "dequantize",
    "quantize",
    "calibrate activation smoothing",
    "allocate KV cache",
    "warm up",
    "prompt text",
)


def load_percent(stage: str, fraction: float) -> int | None:
    """How far the whole load has got at `fraction` of `stage`; None for a stage outside a load."""
    if stage not in LOAD_STAGES:
        return None
    return int((LOAD_STAGES.index(stage) + fraction) / len(LOAD_STAGES) * 100)


class EngineStatus:
    """The loaded engine's line, redrawn while its words change (a background compile moves its
    seconds, then changes how decode runs)."""

    def __init__(self):
        self.info: EngineInfo | ServerInfo | None = None
        self._decode_mode_shown = ""
        self._warming_shown = False

    def compile_progress(self) -> CompileProgress | None:
        return self.info.compile_progress() if isinstance(self.info, EngineInfo) else None

    def warming_up(self) -> str:
        """While the decode graph compiles in the background the first steps run eagerly on cores
        the compiler shares, many times slower, so a run started now shows little for seconds:
        say so, and how much of the compile is left, rather than look frozen. "" once the compile
        has ended (or for a server)."""
        progress = self.compile_progress()
        if progress is None:
            return ""
        return f"warming up, {progress.describe()}; until then steps run eagerly and slowly"

    def plots_note(self, run_held: bool) -> str:
        """The plots' titles while warming up ("" once warm)."""
        progress = self.compile_progress()
        if progress is None:
            return ""
        return f"warming up, {progress.time_so_far()}" + ("<br>the run starts when it is warm" if run_held else "")

    def changed(self) -> bool:
        """The engine's line reads differently now than when last drawn."""
        info = self.info
        return isinstance(info, EngineInfo) and (
            info.decode_mode() != self._decode_mode_shown or self._warming_shown or bool(self.warming_up())
        )

    def line(self) -> str:
        """What the status line says about the engine loaded (a server: its name)."""
        info = self.info
        if isinstance(info, ServerInfo):
            return f"connected: {info.name}"
        self._decode_mode_shown = info.decode_mode()
        kv = f", KV {info.kv_cache_dtype}" if info.kv_cache_dtype != info.dtype else ""
        warming = self.warming_up()
        self._warming_shown = bool(warming)
        return (
            f"ready: {Path(info.model_path).name} ({info.dtype}{kv}, {info.device}, {info.quantization}, "
            f"decode {self._decode_mode_shown})" + (f" — {warming}" if warming else "")
        )

    def after_failure(self, has_backend: bool) -> str | None:
        """The line after a failure: what is still loaded (None: nothing was, say so as before)."""
        if not has_backend:
            return "no engine loaded: apply a configuration"
        return self.line() if self.info is not None else None
