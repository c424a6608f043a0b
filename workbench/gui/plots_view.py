"""The centre of the window: the five live plots, refreshed from MetricsStore snapshots, with the
selected step's cursor across them (a click selects the step at that time; ←/→ move it)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pyqtgraph.exporters  # noqa: F401  (pg.exporters)
from PySide6.QtCore import QRectF, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from workbench.analysis.stated_error import StatedError, one_line
from workbench.backends.protocol import IN_PROCESS, BackendCapabilities
from workbench.gui.charts.plots import (
    LATENCY_UNITS,
    PER_STEP_PLOTS,
    PLOT_NEEDS,
    LatencyPlot,
    all_plots,
    draw_ghost,
    percentile_summary,
    set_title,
    show_not_exposed,
)
from workbench.gui.elided_label import ElidedLabel
from workbench.gui.step_panel import step_keys
from workbench.live.metrics_store import MetricsSnapshot


def axis_end(latest: float) -> float:
    """Where a whole-run time axis ends: past `latest` by a step of half its leading digit
    (3,500 s -> 4,000 s), so the axis moves a few times per decade of run length."""
    if latest <= 0:
        return 1.0
    step = 10 ** np.floor(np.log10(latest)) / 2
    return float((np.floor(latest / step) + 1) * step)


def _latest_time(snapshot: MetricsSnapshot) -> float:
    ends = [snapshot.steps["time_s"][-1:], snapshot.requests["finish_s"][-1:]]
    return max((float(end[0]) for end in ends if end.size), default=0.0)


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


PLOT_MIN_DATA_HEIGHT = 80  # pixels: the least data area a plot is drawn with; below, the plots scroll
GOODPUT_MEANING = (
    "Goodput: the share of arrived requests meeting every SLO set before the run, with n, as in report.json; "
    "rejected, aborted and still unfinished requests count as misses."
)


BESIDE_COMPILE_MEANING = (
    "Shaded: steps run while the decode graph compiled in the background. They ran eagerly, beside the "
    "compiler, 5 to 65 times as slow as compiled steps: what they show is the warm-up, not the engine. "
    "The report says how many steps and requests it touched (beside_compile)."
)


def header_label(text: str) -> ElidedLabel:
    """A label of the plots' header row: its whole text where there is room, "…" (or its short
    form) where not (the goodput line made the window 915 pixels wide at least under Xvfb's fonts)."""
    label = ElidedLabel(text)
    label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
    return label


class PlotsView(QWidget):
    request_clicked = Signal(str)  # the request of a clicked latency point
    time_clicked = Signal(float)  # seconds since the run started, where a plot was clicked
    step_moved = Signal(int)  # ←/→ over the plots: one step back or on

    def __init__(self):
        super().__init__()
        self.plots = all_plots()
        for points in self.latency.points.values():
            points.item.sigClicked.connect(self._point_clicked)
        self.layout_widget = pg.GraphicsLayoutWidget()
        positions = {
            "kv_occupancy": (0, 0),
            "queue_depth": (0, 1),
            "latency": (1, 0),
            "throughput": (1, 1),
            "batch_composition": (2, 0),
        }
        self._rows = 1 + max(row for row, _ in positions.values())
        self._plots_in_row = [
            [self.plots[name] for name, (at, _) in positions.items() if at == row] for row in range(self._rows)
        ]
        for name, (row, column) in positions.items():
            self.layout_widget.addItem(
                self.plots[name].plot, row=row, col=column, colspan=2 if name == "batch_composition" else 1
            )
        # pyqtgraph's 9-pixel margins and 6-pixel gaps: 40 pixels of a column that needs them for data.
        self.layout_widget.ci.setContentsMargins(2, 2, 2, 2)
        self.layout_widget.ci.setSpacing(2)
        # One time range for all: zooming into a moment in one plot shows it in every plot. Not
        # pyqtgraph's setXLink: it aligns linked views by pixel, and the batch plot is twice as wide.
        for plot in self.plots.values():
            view = plot.plot.vb
            view.sigRangeChangedManually.connect(lambda _mask, view=view: self._zoomed_by_user(view))
        self.zoomed = False  # the user zoomed or panned: draw what they look at, and leave the axis alone
        # The selected step: one vertical cursor across every plot; the selected request's steps:
        # marks along the batch plot's time axis.
        self.cursors = {}
        for name, plot in self.plots.items():
            cursor = pg.InfiniteLine(
                angle=90, movable=False, pen=pg.mkPen("#ecf0f1", width=1, style=Qt.PenStyle.DashLine)
            )
            cursor.setZValue(50)
            cursor.setVisible(False)
            plot.plot.addItem(cursor, ignoreBounds=True)
            self.cursors[name] = cursor
        # The steps run eagerly beside the decode graph's compile (a run begun during the warm-up):
        # shaded on every per-step plot, so slow first steps are not read as the engine's speed.
        self.beside_compile = {}
        for name in PER_STEP_PLOTS:
            region = pg.LinearRegionItem(
                movable=False, brush=pg.mkBrush(230, 126, 34, 40), pen=pg.mkPen(None), span=(0.0, 1.0)
            )
            region.setZValue(-20)
            region.setVisible(False)
            region.setToolTip(BESIDE_COMPILE_MEANING)
            pg.InfLineLabel(region.lines[1], text="warm-up: eager", position=0.92, anchor=(1, 0), color="#e67e22")
            self.plots[name].plot.addItem(region, ignoreBounds=True)
            self.beside_compile[name] = region
        self.request_steps = pg.ScatterPlotItem(symbol="t1", size=9, brush="#ecf0f1", pen=None)
        self.plots["batch_composition"].plot.addItem(self.request_steps, ignoreBounds=True)
        self.layout_widget.scene().sigMouseClicked.connect(self._scene_clicked)
        step_keys(self, self.step_moved.emit)
        self._axis_end: float | None = None
        self.latency_mode = QComboBox()
        self.latency_mode.addItems(["TTFT", "e2e", "TPOT"])
        self.latency_mode.setToolTip(
            "What the per-request latency plot shows, on an axis of its own: time to first token, "
            "arrival to last token (e2e), or time per output token. Hovering a point shows all three."
        )
        self.latency_mode.currentIndexChanged.connect(self._mode_changed)
        self.snapshot: MetricsSnapshot | None = None  # the last data drawn
        self.whole = False  # whether that data is a whole run (see update_from)
        self.baseline: MetricsSnapshot | None = None  # a past run drawn faded under the live one
        self.baseline_name = ""
        self._ghosts: list = []
        self.not_exposed: set[str] = set()  # plots the backend has no data for
        # Whole where there is room, else its short form, never cut before its n ("38 of n=4…"
        # at 800 px); what it counts is in its tooltip.
        self.goodput = header_label("goodput: -")
        self.goodput.setToolTip(GOODPUT_MEANING)
        header = QHBoxLayout()
        header.addWidget(self.latency_mode)
        self.follow = QCheckBox("follow")  # "follow [30 s]": the last 30 s (room for the goodput beside it at 800 px)
        self.follow.setToolTip("Show only the most recent seconds of the run; off: the whole run from t = 0.")
        self.follow_seconds = QSpinBox()
        self.follow_seconds.setRange(1, 24 * 3600)
        self.follow_seconds.setValue(30)
        self.follow_seconds.setSuffix(" s")
        self.follow.toggled.connect(self._follow_toggled)
        self.follow_seconds.valueChanged.connect(self.redraw)
        header.addWidget(self.follow)
        header.addWidget(self.follow_seconds)
        header.addStretch(1)
        # Which run the plots show when it is not the live one (an opened run folder).
        self.source_label = header_label("")
        self.source_label.setStyleSheet("color: #f39c12")
        header.addWidget(self.source_label)
        self.baseline_label = QLabel("")
        self.baseline_label.setWordWrap(True)  # long texts wrap: the window must fit an 800-pixel screen
        header.addWidget(self.baseline_label)
        header.addWidget(self.goodput)
        # On a simulated GPU: what its times are worth, per kind of figure, on a row of its own
        # under the header (beside it, the header needed 847 px at 800); hidden otherwise.
        self.simulated_error = ElidedLabel(hide_when_empty=True)
        self.simulated_error.setStyleSheet("color: #f39c12")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(header)
        layout.addWidget(self.simulated_error)
        # Where the centre is narrower than two columns of plots need (an 800-pixel screen), or
        # shorter than three rows with a readable data area each (a tab open at 800x600), they
        # scroll instead of being cut at the window's edge or squeezed.
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.layout_widget)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        layout.addWidget(self.scroll, 1)
        self._keep_reachable()

    @property
    def latency(self) -> LatencyPlot:
        return self.plots["latency"]

    def _point_clicked(self, scatter, points, event) -> None:
        if len(points):
            self.request_clicked.emit(self.latency.request_at(int(points[0].data())))

    def _scene_clicked(self, event) -> None:
        """A left click in a plot selects the time under it; a click that a latency point took
        selects that point's request instead."""
        if event.button() != Qt.MouseButton.LeftButton or event.double() or event.isAccepted():
            return
        for plot in self.plots.values():
            view = plot.plot.vb
            if view.sceneBoundingRect().contains(event.scenePos()):
                self.time_clicked.emit(float(view.mapSceneToView(event.scenePos()).x()))
                return

    def set_cursor(self, seconds: float | None) -> None:
        """Draw the selected step's time across every plot (None hides it)."""
        for cursor in self.cursors.values():
            if seconds is not None:
                cursor.setPos(seconds)
            cursor.setVisible(seconds is not None)

    def show_source(self, past_run: str | None) -> None:
        """Label the plots with the opened run they show; None: they show the live run."""
        self.source_label.setText(f"showing {past_run} (Back to live returns)" if past_run else "")

    def show_simulated_error(self, errors: list[StatedError]) -> None:
        """Say, beside the plots, each kind of figure's measured error where the simulated GPU's
        settings stand (docs/memory.md), or that no published run checks them; none: the engine
        is real and the label goes."""
        if not errors:
            self.simulated_error.setText("")
            return
        text, short = one_line(errors)
        self.simulated_error.setText(text, short=short)
        self.simulated_error.setToolTip(
            "\n".join(error.phrase() for error in errors)
            + "\nThe median |simulated / published - 1| over the published figures of that kind at these "
            "settings: the stack, one GPU or tensor parallel, multi-step or not, chunked prefill or not "
            '(presets/published/errors.toml; docs/memory.md, "Published runs the simulated GPUs are held to").'
        )

    def set_request_steps(self, seconds: list[float]) -> None:
        """Mark the steps that touched the selected request along the batch plot's time axis."""
        self.request_steps.setData(seconds, [0.0] * len(seconds))

    def _mode_changed(self, index: int) -> None:
        self.latency.set_mode(LatencyPlot.MODES[index])
        self.redraw()
        if self.baseline is not None:
            self.set_baseline(self.baseline, self.baseline_name)

    def set_capabilities(self, capabilities: BackendCapabilities = IN_PROCESS) -> None:
        self.not_exposed = {name for name, (needed, _) in PLOT_NEEDS.items() if not getattr(capabilities, needed)}
        for name in self.not_exposed:
            show_not_exposed(self.plots[name].plot, PLOT_NEEDS[name][1])

    def update_from(self, snapshot: MetricsSnapshot, waiting: str = "", whole: bool = False) -> None:
        """`waiting`: why no step has come yet, in a few words (the engine warming up), put in
        each per-step plot's title until the first step arrives. `whole`: the run has ended (no
        request in flight, no traffic left), so its latency percentiles get their intervals."""
        self.snapshot, self.whole = snapshot, whole
        self.latency.whole = whole
        x_range = self._time_range(snapshot)
        for name, plot in self.plots.items():
            if name not in self.not_exposed:
                plot.update(snapshot, x_range)
                if waiting and name in PER_STEP_PLOTS and not snapshot.steps["time_s"].size:
                    # Two lines: in one, the note widened a column past a 1280-pixel window's.
                    set_title(plot.plot, f"{PER_STEP_PLOTS[name]}: no step yet<br>{waiting}")
        for region in self.beside_compile.values():
            region.setVisible(snapshot.beside_compile is not None)
            if snapshot.beside_compile is not None:
                region.setRegion(snapshot.beside_compile)
        self._update_goodput(snapshot)
        QTimer.singleShot(0, self, self._keep_reachable)  # once the new titles have laid their plots out

    def _keep_reachable(self) -> None:
        """The plots' widget never narrower than their titles, axes and legends need, nor shorter
        than they need with PLOT_MIN_DATA_HEIGHT of data each: past that, the scroll area scrolls
        (pyqtgraph would draw the right column past the edge, unseen, and squeeze the data areas
        to 20-45 pixels at 800x600 with a tab open)."""
        grid = self.layout_widget.ci.layout
        # Each row at least as tall as its tallest plot's title, axes and legend plus the data area:
        # spread over the rows alike, the extra left the latency plot (two title lines once a run is
        # whole) 76 pixels of data at 800x600 under Xvfb.
        for row, plots in enumerate(self._plots_in_row):
            least_plot = max(plot.plot.effectiveSizeHint(Qt.SizeHint.MinimumSize).height() for plot in plots)
            grid.setRowMinimumHeight(row, math.ceil(least_plot) + PLOT_MIN_DATA_HEIGHT)
        grid.invalidate()
        least = self.layout_widget.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize)
        frame = 2 * self.layout_widget.frameWidth()
        width = math.ceil(least.width()) + frame
        height = math.ceil(least.height()) + frame
        if (width, height) != (self.layout_widget.minimumWidth(), self.layout_widget.minimumHeight()):
            self.layout_widget.setMinimumSize(width, height)

    def redraw(self) -> None:
        """Draw the last data again, for a new range (the engine may be idle, or this may be a past run)."""
        if self.snapshot is not None:
            self.update_from(self.snapshot, whole=self.whole)

    def _time_range(self, snapshot: MetricsSnapshot) -> tuple[float, float] | None:
        """The seconds to draw, set on the shared time axis. Following: the last N seconds. The
        whole run (None): the axis ends a step past the latest data and moves only when the data
        reaches it, since each move lays out and redraws every axis's ticks and labels. Zoomed by
        the user: their range; the pyqtgraph "A" button or "View All" returns to the whole run."""
        latest = _latest_time(snapshot)
        if self.follow.isChecked():
            shown = (max(0.0, latest - self.follow_seconds.value()), max(latest, 1e-3))
            self._set_time_range(*shown)
            return shown
        if any(plot.plot.vb.autoRangeEnabled()[0] for plot in self.plots.values()):
            self.zoomed, self._axis_end = False, None
        if self.zoomed:
            return tuple(self.plots["kv_occupancy"].plot.vb.viewRange()[0])
        if self.baseline is not None:
            latest = max(latest, _latest_time(self.baseline))
        end = axis_end(latest)
        if end != self._axis_end:
            self._axis_end = end
            self._set_time_range(0, end)
        return None

    def _set_time_range(self, low: float, high: float) -> None:
        for plot in self.plots.values():
            plot.plot.setXRange(low, high, padding=0)

    def _zoomed_by_user(self, view: pg.ViewBox) -> None:
        """Following stops without `_follow_toggled`, which would return to the whole run."""
        with QSignalBlocker(self.follow):
            self.follow.setChecked(False)
        self.zoomed = True
        self._set_time_range(*view.viewRange()[0])
        self.redraw()

    def _follow_toggled(self, following: bool) -> None:
        """Following shows the last N seconds; otherwise the whole run from t = 0."""
        if not following:
            self.zoomed, self._axis_end = False, None
        self.redraw()

    def export(self, folder: Path) -> list[Path]:
        """Each plot as it is shown now: NAME.png and NAME.csv (pyqtgraph's exporters; the CSV
        has an x and a y column per line or point series) and NAME.svg."""
        if not folder.is_dir():
            raise FileNotFoundError(2, "no such folder", str(folder))
        written = []
        for name, plot in self.plots.items():
            for suffix, export in (
                ("png", lambda item, path: pg.exporters.ImageExporter(item).export(str(path))),
                ("svg", _export_svg),
                ("csv", lambda item, path: pg.exporters.CSVExporter(item).export(str(path))),
            ):
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
        key = self.latency.mode
        self.baseline_label.setText(
            f"baseline (faded): {name}, {key.upper()} {percentile_summary(baseline, key)} {LATENCY_UNITS[key]}"
        )

    def _update_goodput(self, snapshot: MetricsSnapshot) -> None:
        meeting, n = snapshot.goodput
        share = f"{100.0 * meeting / n:.1f}%" if n else "-"
        # The short form, what an 800-pixel screen shows, says every request met as "100%", never
        # wider than "99.9%": "100.0%, n=108" made the window 803 pixels wide under Xvfb's fonts.
        short_share = "100%" if n and meeting == n else share
        self.goodput.setText(f"goodput {share} ({meeting} of n={n})", short=f"goodput {short_share}, n={n}")
        self.goodput.setToolTip(f"{GOODPUT_MEANING}\nNow: {meeting} of {n} arrived requests meet every SLO.")
