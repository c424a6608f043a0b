"""The Runs tab's file actions: save the current run, draw a past one as the baseline, export the
plots, compare two run folders. Each asks for a folder when none is given (tests give one), and
reports what it did in the Runs tab or why it failed in the status line."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from engine import EngineError
from workbench.analysis.compare import compare_folders, format_comparison
from workbench.analysis.report_summary import summary_lines
from workbench.bench.run_files import open_run, save_run
from workbench.gui.charts.report_images import plot_images_one_by_one
from workbench.gui.engine_worker import EngineWorker
from workbench.gui.plots_view import PlotsView


class _SaveSignals(QObject):
    """The save thread's end, delivered on the GUI thread (a queued connection: the receiver lives
    there): the folder, then the log and report read back, or the error in words."""

    written = Signal(object, object, object)
    failed = Signal(str)


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
        self._signals = _SaveSignals()
        self._signals.written.connect(self._draw_images)
        self._signals.failed.connect(lambda message: self._end_save(None, message))
        self.saving: Path | None = None  # the folder a save is writing now
        self.last_saved: Path | None = None  # the folder of the last save that completed

    def _ask(self, folder: str | None, question: str) -> str:
        return folder or QFileDialog.getExistingDirectory(self._parent, question)

    def save_run(self, folder: str | None = None) -> Path | None:
        """Save the current run into a folder, off the GUI thread: the engine thread writes the log
        between two steps, a thread of its own reads it back and writes the report files (18-31 s
        for a 2,000-request run froze the window), then the GUI thread draws the plots' PNGs, one
        per turn of its event loop. The Runs tab says each stage; `last_saved` is the folder once
        done. The folder, or None when none was chosen or a save is under way."""
        if self.saving is not None:
            self._failed(f"save run: still saving into {self.saving}")
            return None
        if not (folder := self._ask(folder, "Save the current run into")):
            return None
        target = self.saving = Path(folder)
        self._say(f"saving the run into {target}: the run log and report files…")
        threading.Thread(target=self._write, args=(target,), name="save-run", daemon=True).start()
        return target

    def _write(self, target: Path) -> None:
        try:
            log, report = save_run(target, self._worker.save_log_copy)
        except EngineError as error:
            self._signals.failed.emit(f"save run: {error}")
        except OSError as error:
            self._signals.failed.emit(f"save run: {error.filename or target}: {error.strerror or error}")
        else:
            self._signals.written.emit(target, log, report)

    def _draw_images(self, target: Path, log, report: dict) -> None:
        images = plot_images_one_by_one(log, target)
        drawn: list[Path] = []

        def draw_next() -> None:
            try:
                drawn.append(next(images))
            except StopIteration:
                self._end_save(target)
                saved = f"saved to {target} (run.jsonl, report.json, {len(drawn)} plot images)"
                self._say("\n\n".join([saved, "\n".join(summary_lines(report))]))
                return
            except OSError as error:
                self._end_save(None, f"save run: {error.filename or target}: {error.strerror or error}")
                return
            self._say(f"saving the run into {target}: plot images, {len(drawn)} drawn…")
            QTimer.singleShot(0, draw_next)

        QTimer.singleShot(0, draw_next)

    def _end_save(self, target: Path | None, failure: str = "") -> None:
        """The save is over: done into `target`, or failed (None) with `failure` for the status line."""
        self.saving = None
        if target is None:
            self._failed(failure)
        else:
            self.last_saved = target

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
