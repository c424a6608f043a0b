"""The engine loop's Qt face (the loop itself, without Qt, is workbench/live/engine_loop.py): its
four events become signals, which Qt delivers in the window's thread."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from workbench.backends.loader import BackendLoader
from workbench.live.engine_loop import EngineEvents, EngineLoop


class _Signals(QObject):
    loading = Signal(str, float)  # stage, fraction done
    loaded = Signal(object)  # EngineInfo, or ServerInfo for a server
    failed = Signal(str)  # a one-line message for the user
    traffic_state = Signal(str)  # "idle" (loaded), "running", "paused", "stopped", "finished"


class EngineWorker(EngineLoop):
    def __init__(self, runs_dir: Path | None = None, loader: BackendLoader | None = None):
        self.signals = _Signals()  # created in the window's thread, so their slots run there
        signals = self.signals
        events = EngineEvents(
            signals.loading.emit, signals.loaded.emit, signals.failed.emit, signals.traffic_state.emit
        )
        super().__init__(events, runs_dir, loader)

    @property
    def loading(self):
        return self.signals.loading

    @property
    def loaded(self):
        return self.signals.loaded

    @property
    def failed(self):
        return self.signals.failed

    @property
    def traffic_state(self):
        return self.signals.traffic_state
