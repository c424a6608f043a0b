"""The Arms view: a preset's two variants side by side, the demo of a quantization (or any other
choice) in one view: TPOT and TTFT with n, memory by part, KV capacity and why it changed, the
quality each arm costs, and the decision's verdict.

"Run both arms" runs `workbench bench --preset P --variant A --variant B` in a process of its own
(the two arms shown, not the preset's other variants; one after the other, each on a fresh engine,
exactly as the command line does, while the window's engine stays as it is), N times interleaved
with "repeats: N" (`--repeat N`: the verdict on the paired repeats), into a run folder of its own
beside the window's runs; "Open arms…" shows a folder that command wrote before.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QProcess, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.errors import EngineError
from workbench.analysis.arms import Arms, read_arms, the_two_arms
from workbench.gui.form_widgets import choice_box
from workbench.runs.run_folder import new_run_folder, runs_home
from workbench.traffic.presets import load_preset, preset_names

# Anything else (no verdict, no decision): the default colour.
VERDICT_COLOURS = {"accept": "#2ecc71", "reject": "#e74c3c", "inconclusive": "#f39c12"}


class ArmsView(QWidget):
    run_requested = Signal(str)  # the Run button's preset: the window starts it when its own engine is quiet
    finished = Signal(bool)  # a run of both arms ended: True once they are shown

    def __init__(self):
        super().__init__()
        self._waiting_preset: str | None = None  # a preset whose arms wait for the window's engine
        self._busy: Callable[[], str] = str
        self.preset = choice_box(
            [name for name in preset_names() if len(load_preset(name).variants) >= 2],
            "A preset with variants: each variant is one arm.",
        )
        # Narrow enough that the window still fits an 800-pixel-wide screen; the list shows whole names.
        self.preset.setSizeAdjustPolicy(self.preset.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.preset.setMinimumContentsLength(12)
        self.run_button = QPushButton("Run both arms")
        self.run_button.setToolTip(
            "workbench bench --preset P, in a process of its own: each arm on a fresh engine, one after the other"
        )
        self.run_button.clicked.connect(lambda: self.run_requested.emit(self.preset.currentText()))
        self.repeats = QSpinBox()
        self.repeats.setRange(1, 50)
        self.repeats.setToolTip(
            "Run the arms this many times, interleaved (A B, B A, A B ...), and judge the decision on the paired "
            "repeats: accept, reject or inconclusive (workbench bench --repeat N)"
        )
        self.open_button = QPushButton("Open arms…")
        self.open_button.setToolTip("A folder written by workbench bench --preset P (one sub-folder per variant)")
        self.open_button.clicked.connect(lambda: self.open_arms())
        self.status = QLabel("Choose a preset with two variants and run both arms, or open a folder bench wrote.")
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, 4)
        self.table.verticalHeader().setVisible(False)
        self.table.setHorizontalHeaderLabels(["", "baseline", "candidate", "change"])  # not Qt's "1 2 3 4"
        self.table.setVisible(False)  # until there are arms to show
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        for column, mode in enumerate(
            (
                QHeaderView.ResizeMode.ResizeToContents,
                QHeaderView.ResizeMode.Stretch,
                QHeaderView.ResizeMode.Stretch,
                QHeaderView.ResizeMode.ResizeToContents,
            )
        ):
            header.setSectionResizeMode(column, mode)  # both arms' columns share what the names leave
        self.table.setWordWrap(True)
        self.kv_why, self.checks, self.verdict = QLabel(""), QLabel(""), QLabel("")
        for label in (self.kv_why, self.checks, self.verdict):
            label.setWordWrap(True)
        controls = QHBoxLayout()
        for widget in (self.preset, self.run_button, self.open_button):
            controls.addWidget(widget)
        controls.addStretch(1)
        # On a row of its own: beside the others it made the window wider than an 800-pixel screen.
        repeats_row = QHBoxLayout()
        repeats_row.addWidget(QLabel("Repeats:"))
        repeats_row.addWidget(self.repeats)
        repeats_row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addLayout(repeats_row)
        layout.addWidget(self.status)
        # The table as tall as its rows, the reasons and the verdict right under it: stretched, the
        # table squeezed the labels' wrapped lines into each other at 1280x800.
        self.table.setSizeAdjustPolicy(QAbstractScrollArea.SizeAdjustPolicy.AdjustToContents)
        layout.addWidget(self.table)
        for label in (self.kv_why, self.checks, self.verdict):
            layout.addWidget(label)
        layout.addStretch(1)
        self.process: QProcess | None = None
        self._out: Path | None = None  # where the arms being run are written
        self._output = ""  # what that bench process has said so far

    def run_when_quiet(self, preset: str, busy: Callable[[], str]) -> None:
        """Run the preset's arms once `busy()` says nothing (what keeps the window's own engine
        busy: its traffic or its decode graph's compile would share the cores with the arms and
        skew the comparison). A later choice replaces one still waiting."""
        already_waiting = self._waiting_preset is not None
        self._waiting_preset, self._busy = preset, busy
        if not already_waiting:
            self._run_when_quiet()

    def _run_when_quiet(self) -> None:
        if self._waiting_preset is None:
            return  # stopped: the window is closing
        if reason := self._busy():
            self.status.setText(
                f"waiting for the window's engine before running {self._waiting_preset}'s arms "
                f"({reason}; Stop ends the traffic)"
            )
            QTimer.singleShot(1000, self, self._run_when_quiet)
            return
        preset, self._waiting_preset = self._waiting_preset, None
        self.run_arms(preset)

    def run_arms(self, preset: str, out: Path | None = None) -> None:
        """Run the preset's two arms in a `workbench bench` process writing into `out` (default: a
        new run folder beside the window's, named in the status line, kept as any run is), then
        show them."""
        if self.process is not None:
            self.status.setText("the arms of the last run are still running")
            return
        try:
            scenario = load_preset(preset)
            decision = dataclasses.asdict(scenario.decision) if scenario.decision else {}
            arms = the_two_arms(list(scenario.variants), decision)
        except EngineError:
            arms = []  # bench says what is wrong with the preset, in the status line
        self._out = out or new_run_folder(runs_home(), f"arms-{Path(preset).stem}")
        repeats = self.repeats.value()
        arguments = ["-m", "workbench", "bench", "--preset", preset, "--out", str(self._out), "--no-plots"]
        arguments += [argument for arm in arms for argument in ("--variant", arm)]
        arguments += ["--repeat", str(repeats)] if repeats > 1 else []
        self.process = process = QProcess(self)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        process.readyReadStandardOutput.connect(self._show_progress)
        process.finished.connect(self._finished)
        self.run_button.setEnabled(False)
        times = f", {repeats} times each, interleaved" if repeats > 1 else ""
        self.status.setText(f"running {preset}'s arms{times} into {self._out} …")
        self._output = ""
        process.start(sys.executable, arguments)

    def _show_progress(self) -> None:
        """bench's last line (which arm runs, its progress bar), after what it writes into."""
        self._output += bytes(self.process.readAllStandardOutput()).decode(errors="replace")
        last = self._output.replace("\r", "\n").strip().splitlines()[-1:] or [""]
        self.status.setText(f"running the arms into {self._out}: {last[0][:160]}")

    def _finished(self, exit_code: int, _status) -> None:
        self.process.deleteLater()
        self.process = None
        self.run_button.setEnabled(True)
        if exit_code != 0:
            tail = "\n".join(self._output.replace("\r", "\n").strip().splitlines()[-3:])
            self.status.setText(f"workbench bench exited {exit_code}; what it said last:\n{tail}")
            self.finished.emit(False)
            return
        self.finished.emit(self.show_arms(self._out) is not None)

    def open_arms(self, folder: str | None = None) -> None:
        folder = folder or QFileDialog.getExistingDirectory(self, "A folder written by workbench bench --preset P")
        if folder:
            self.show_arms(Path(folder))

    def show_arms(self, folder: Path) -> Arms | None:
        try:
            arms = read_arms(folder)
        except (EngineError, OSError, KeyError, TypeError) as error:  # KeyError, TypeError: a report of another shape
            self.status.setText(
                f"{folder}: {error if isinstance(error, EngineError) else 'not the reports of workbench bench'}"
            )
            return None
        self.status.setText(
            f"{folder}: baseline {arms.baseline!r}, candidate {arms.candidate!r}"
            + (f", {arms.repeats} repeats (figures: means over them)" if arms.repeats > 1 else "")
            + ("".join(f"\nwarning: {difference}" for difference in arms.differences))
        )
        if arms.preset and self.preset.findText(arms.preset) >= 0:
            self.preset.setCurrentText(arms.preset)  # Run both arms runs these arms' preset, not the list's first
        self.table.setVisible(True)
        self.table.setHorizontalHeaderLabels(
            ["", f"baseline: {arms.baseline}", f"candidate: {arms.candidate}", "change"]
        )
        self.table.setRowCount(len(arms.rows))
        for row, entry in enumerate(arms.rows):
            for column, text in enumerate((entry.what, entry.baseline, entry.candidate, entry.change)):
                self.table.setItem(row, column, QTableWidgetItem(text))
        self.table.resizeRowsToContents()
        self.kv_why.setText(arms.kv_capacity_why)
        self.checks.setText("\n".join(arms.checks))
        self.verdict.setText(f"verdict: {arms.verdict}")
        colour = VERDICT_COLOURS.get(arms.verdict.split(":")[0], "")
        self.verdict.setStyleSheet(f"font-weight: bold; color: {colour}" if colour else "font-weight: bold")
        return arms

    def stop(self) -> None:
        """End a run of the arms still going, or a wait for one (the window is closing)."""
        self._waiting_preset = None
        if self.process is not None:
            self.process.finished.disconnect(self._finished)
            self.process.kill()
            self.process.waitForFinished(5000)
            self.process = None  # its folder stays: each arm's run log says how far it got
