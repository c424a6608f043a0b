"""The Runs tab's file actions: save the current run, draw a past one as the baseline, export the
plots, compare two run folders. Each asks for a folder when none is given (tests give one), and
reports what it did in the Runs tab or why it failed in the status line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from engine import EngineError
from workbench.analysis.compare import compare_folders, format_comparison
from workbench.bench.run_files import open_run, save_run
from workbench.gui.charts.report_images import export_plot_images
from workbench.gui.engine_worker import EngineWorker
from workbench.gui.plots_view import PlotsView


class RunFilesActions:
    def __init__(
        self,
        parent: QWidget,
        worker: EngineWorker,
        plots: PlotsView,
        say: Callable[[str], None],
        failed: Callable[[str], None],
    ):
        self._parent, self._worker, self._plots = parent, worker, plots
        self._say, self._failed = say, failed  # the Runs tab's text; the status line's error

    def _ask(self, folder: str | None, question: str) -> str:
        return folder or QFileDialog.getExistingDirectory(self._parent, question)

    def save_run(self, folder: str | None = None) -> Path | None:
        if not (folder := self._ask(folder, "Save the current run into")):
            return None
        target = Path(folder)
        try:
            log, report = save_run(target, self._worker.save_log_copy)
            export_plot_images(log, target)
        except EngineError as error:
            self._failed(f"save run: {error}")
            return None
        except OSError as error:
            self._failed(f"save run: {error.filename or target}: {error.strerror or error}")
            return None
        self._say(f"saved to {target}\n\n{json.dumps(report['metrics'], indent=1)[:4000]}")
        return target

    def read_run(self, folder: str, action: str, with_traces: bool = False):
        """A run folder's log and its replayed store, or None (and the reason in the status line)."""
        try:
            return open_run(Path(folder), with_traces)
        except EngineError as error:
            self._failed(f"{action}: {error}")
            return None

    def open_baseline(self, folder: str | None = None) -> None:
        """A past run (ours or a server's), faded under the live plots."""
        folder = self._ask(folder, "A run folder to draw as the baseline")
        if not folder or (run := self.read_run(folder, "baseline")) is None:
            return
        log, store = run
        self._plots.set_baseline(store.snapshot(), Path(folder).name)
        self._say(f"baseline: {folder} ({len(log.requests)} requests), drawn faded under the live plots")

    def clear_baseline(self) -> None:
        self._plots.set_baseline(None)

    def export_plots(self, folder: str | None = None) -> list[Path]:
        if not (folder := self._ask(folder, "Export each plot (PNG, SVG, CSV) into")):
            return []
        try:
            written = self._plots.export(Path(folder))
        except OSError as error:
            self._failed(f"export plots: {folder}: {error.strerror or error}")
            return []
        self._say(f"exported {len(written)} files into {folder}: " + ", ".join(path.name for path in written))
        return written

    def compare_runs(self, baseline: str | None = None, candidate: str | None = None) -> bool:
        """True when the comparison is shown."""
        baseline = self._ask(baseline, "Baseline run folder")
        candidate = candidate or (baseline and self._ask(None, "Candidate run folder"))
        if not baseline or not candidate:
            return False
        try:
            result = compare_folders(baseline, candidate)
        except EngineError as error:
            self._failed(str(error))
            return False
        self._say(format_comparison(result))
        return True
