"""The Sweep view: a `workbench sweep` folder's charts (workbench/gui/charts/sweep_chart.py) in the window.
A click on a point opens that point's run (its plots, steps and Why) in the Live view."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from engine.errors import EngineError
from workbench.analysis.sweep import Sweep, describe_settings, read_sweep
from workbench.gui.charts.sweep_chart import sweep_plots

# The narrowest a chart reads at (its axes, its title's longest line); narrower than two of these,
# the charts stack instead of the second being drawn off screen (the view is 362 px at 800x600).
MIN_CHART_WIDTH = 340


class SweepView(QWidget):
    run_chosen = Signal(str, str)  # a point's run folder, and its settings in words

    def __init__(self):
        super().__init__()
        self.sweep: Sweep | None = None
        self.plots: dict[str, pg.PlotItem] = {}
        self._columns = 0  # how the charts are arranged now: side by side (2) or stacked (1)
        self.open_button = QPushButton("Open sweep…")
        self.open_button.setToolTip("A folder written by workbench sweep (it holds sweep.csv).")
        self.open_button.clicked.connect(lambda: self.open())
        self.caption = QLabel("Open a folder written by `workbench sweep`; click a point to open its run.")
        self.caption.setWordWrap(True)
        self.charts = pg.GraphicsLayoutWidget()
        top = QHBoxLayout()
        top.addWidget(self.open_button)
        top.addWidget(self.caption, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.charts, 1)

    def open(self, folder: str | None = None) -> bool:
        folder = folder or QFileDialog.getExistingDirectory(self, "A sweep folder (holding sweep.csv)")
        if not folder:
            return False
        try:
            sweep = read_sweep(Path(folder))
        except EngineError as error:
            self.caption.setText(f"open sweep: {error}")
            return False
        self.show_sweep(sweep)
        return True

    def show_sweep(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self.charts.clear()
        self.plots = sweep_plots(sweep)
        self._columns = 0
        self._arrange()
        for plot in self.plots.values():
            for curve in plot.listDataItems():
                if hasattr(curve, "sweep_rows"):
                    curve.sigPointsClicked.connect(self._point_clicked)
        varied = ", ".join(sweep.keys) or "nothing"
        self.caption.setText(
            f"{sweep.folder}: {len(sweep.rows)} points, varying {varied}. Click a point to open its run."
        )

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._arrange()

    def _arrange(self) -> None:
        """The charts side by side where two fit the view's width, else one above the other."""
        columns = 2 if self.charts.width() >= 2 * MIN_CHART_WIDTH else 1
        if columns == self._columns or not self.plots:
            return
        self._columns = columns
        for plot in self.plots.values():
            if plot.scene() is not None:
                self.charts.removeItem(plot)
        for index, plot in enumerate(self.plots.values()):
            self.charts.addItem(plot, row=index // columns, col=index % columns)

    def _point_clicked(self, curve, points, event=None) -> None:
        if points is None or not len(points):
            return
        self.open_point(curve.sweep_rows[points[0].index()])

    def open_point(self, row: dict) -> None:
        settings = describe_settings({key: row[key] for key in self.sweep.keys})
        self.caption.setText(f"opened {row['folder']} ({settings or 'the preset as it is'}) in the Live view")
        self.run_chosen.emit(str(self.sweep.folder / row["folder"]), settings)
