"""The centre of the window: the five live plots, refreshed from MetricsStore snapshots."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
import pyqtgraph.exporters  # noqa: F401  (pg.exporters)
from PySide6.QtCore import QRectF, Signal
from PySide6.QtGui import QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from workbench.metrics_store import MetricsSnapshot
from workbench.backend import IN_PROCESS, BackendCapabilities
from workbench.gui.plots import PLOT_NEEDS, LatencyPlot, all_plots, draw_ghost, percentile_summary, show_not_exposed


def _export_svg(plot: pg.PlotItem, path: Path) -> None:
    """Qt's own SVG generator: pyqtgraph 0.14's SVGExporter fails on the closed paths Qt 6.11
    writes (pyqtgraph issue 3495)."""
    source = plot.sceneBoundingRect()
    target = QRectF(0, 0, source.width(), source.height())
    generator = QSvgGenerator()
    generator.setFileName(str(path))
    generator.setSize(target.size().toSize())
    generator.setViewBox(target)
    painter = QPainter(generator)
    plot.scene().render(painter, target, source)
    painter.end()


class PlotsView(QWidget):
    request_clicked = Signal(str)  # the request of a clicked latency point

    def __init__(self):
        super().__init__()
        self.plots = all_plots()
        for item in self.latency.points.values():
            item.scatter.sigClicked.connect(self._point_clicked)
        self.layout_widget = pg.GraphicsLayoutWidget()
        positions = {"kv_occupancy": (0, 0), "queue_depth": (0, 1), "latency": (1, 0), "throughput": (1, 1), "batch_composition": (2, 0)}
        for name, (row, column) in positions.items():
            self.layout_widget.addItem(self.plots[name].plot, row=row, col=column, colspan=2 if name == "batch_composition" else 1)
        self.latency_mode = QComboBox()
        self.latency_mode.addItems(["TTFT and e2e", "TPOT"])
        self.latency_mode.setToolTip("What the per-request latency plot shows; rolling percentiles follow TTFT or TPOT.")
        self.latency_mode.currentIndexChanged.connect(self._mode_changed)
        self.snapshot: MetricsSnapshot | None = None  # the last data drawn
        self.baseline: MetricsSnapshot | None = None  # a past run drawn faded under the live one
        self.baseline_name = ""
        self._ghosts: list = []
        self.not_exposed: set[str] = set()  # plots the backend has no data for
        self.goodput = QLabel("goodput: -")
        self.goodput.setWordWrap(True)
        self.goodput.setToolTip("Share of ended requests meeting every SLO set before the run, with n; "
                                "rejected and aborted requests count as misses.")
        header = QHBoxLayout()
        header.addWidget(self.latency_mode)
        self.follow = QCheckBox("follow last")
        self.follow.setToolTip("Show only the most recent seconds of the run; off: the whole run from t = 0.")
        self.follow_seconds = QSpinBox()
        self.follow_seconds.setRange(1, 24 * 3600)
        self.follow_seconds.setValue(30)
        self.follow_seconds.setSuffix(" s")
        self.follow.toggled.connect(self._follow_toggled)
        self.follow_seconds.valueChanged.connect(self._follow_latest)
        header.addWidget(self.follow)
        header.addWidget(self.follow_seconds)
        header.addStretch(1)
        self.baseline_label = QLabel("")
        self.baseline_label.setWordWrap(True)  # long texts wrap: the window must fit an 800-pixel screen
        header.addWidget(self.baseline_label)
        header.addWidget(self.goodput)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(header)
        layout.addWidget(self.layout_widget, 1)

    @property
    def latency(self) -> LatencyPlot:
        return self.plots["latency"]

    def _point_clicked(self, scatter, points, event) -> None:
        if len(points):
            self.request_clicked.emit(self.latency.request_at(int(points[0].data())))

    def _mode_changed(self, index: int) -> None:
        """Redraw at once from the last data (the engine may be idle, or this may be a past run)."""
        self.latency.set_mode(LatencyPlot.MODES[index])
        if self.snapshot is not None:
            self.latency.update(self.snapshot)
        if self.baseline is not None:
            self.set_baseline(self.baseline, self.baseline_name)

    def set_capabilities(self, capabilities: BackendCapabilities = IN_PROCESS) -> None:
        self.not_exposed = {name for name, (needed, _) in PLOT_NEEDS.items() if not getattr(capabilities, needed)}
        for name in self.not_exposed:
            show_not_exposed(self.plots[name].plot, PLOT_NEEDS[name][1])

    def update_from(self, snapshot: MetricsSnapshot) -> None:
        self.snapshot = snapshot
        for name, plot in self.plots.items():
            if name not in self.not_exposed:
                plot.update(snapshot)
        self._update_goodput(snapshot)
        self._follow_latest()

    def _follow_toggled(self, following: bool) -> None:
        """Following shows the last N seconds; otherwise each time axis ranges over the whole run
        (set once here: on every frame it would also undo the user's own zoom)."""
        if following:
            self._follow_latest()
        else:
            for plot in self.plots.values():
                plot.plot.enableAutoRange(x=True)

    def _follow_latest(self) -> None:
        if not self.follow.isChecked():
            return
        latest = 0.0
        if self.snapshot is not None:
            ends = [self.snapshot.steps["time_s"][-1:], self.snapshot.requests["finish_s"][-1:]]
            latest = max((float(end[0]) for end in ends if end.size), default=0.0)
        for plot in self.plots.values():
            plot.plot.setXRange(max(0.0, latest - self.follow_seconds.value()), max(latest, 1e-3), padding=0)

    def export(self, folder: Path) -> list[Path]:
        """Each plot as it is shown now: NAME.png and NAME.csv (pyqtgraph's exporters; the CSV
        has an x and a y column per line or point series) and NAME.svg."""
        if not folder.is_dir():
            raise FileNotFoundError(2, "no such folder", str(folder))
        written = []
        for name, plot in self.plots.items():
            for suffix, export in (("png", lambda item, path: pg.exporters.ImageExporter(item).export(str(path))),
                                   ("svg", _export_svg),
                                   ("csv", lambda item, path: pg.exporters.CSVExporter(item).export(str(path)))):
                path = folder / f"{name}.{suffix}"
                export(plot.plot, path)
                written.append(path)
        return written

    def set_baseline(self, baseline: MetricsSnapshot | None, name: str = "") -> None:
        """Draw a past run faded under the live plots, aligned at t = 0 (None removes it)."""
        for ghost in self._ghosts:
            ghost.getViewBox().removeItem(ghost)
        self._ghosts, self.baseline, self.baseline_name = [], baseline, name
        if baseline is None:
            self.baseline_label.setText("")
            return
        drawn = all_plots()
        drawn["latency"].set_mode(self.latency.mode)
        for name_of_plot, plot in drawn.items():
            if name_of_plot not in self.not_exposed:
                plot.update(baseline)
                self._ghosts += draw_ghost(self.plots[name_of_plot].plot, plot.plot)
        key = "tpot" if self.latency.mode == "tpot" else "ttft"
        self.baseline_label.setText(f"baseline (faded): {name}, {key.upper()} {percentile_summary(baseline, key)} ms")

    def _update_goodput(self, snapshot: MetricsSnapshot) -> None:
        meeting, n = snapshot.goodput
        share = f"{100.0 * meeting / n:.1f}%" if n else "-"
        self.goodput.setText(f"goodput: {share} of ended requests meet every SLO ({meeting} of n={n}; rejected and aborted miss)")
