"""The centre of the window: the five live plots, refreshed from MetricsStore snapshots."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from workbench.metrics_store import MetricsSnapshot
from workbench.backend import IN_PROCESS, BackendCapabilities
from workbench.gui.plots import PLOT_NEEDS, LatencyPlot, all_plots, show_not_exposed


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
        self.not_exposed: set[str] = set()  # plots the backend has no data for
        self.goodput = QLabel("goodput: -")
        self.goodput.setToolTip("Share of ended requests meeting every SLO set before the run, with n; "
                                "rejected and aborted requests count as misses.")
        header = QHBoxLayout()
        header.addWidget(QLabel("Latency plot:"))
        header.addWidget(self.latency_mode)
        header.addStretch(1)
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

    def _update_goodput(self, snapshot: MetricsSnapshot) -> None:
        meeting, n = snapshot.goodput
        share = f"{100.0 * meeting / n:.1f}%" if n else "-"
        self.goodput.setText(f"goodput: {share} of ended requests meet every SLO ({meeting} of n={n}; rejected and aborted miss)")
