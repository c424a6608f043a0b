"""The Why tab: where the tail's time went (workbench/analysis/explain.py), as two stacked bars, the tail's
and everyone's, one segment per cause, and the slowest requests. A click on a segment shows the
history of the slowest tail request whose main cause it is; a click on a request in the list
shows its history (the `workbench trace --request` text).

The window fills it from an opened run, or from the current run's log when "Explain the current
run" is pressed (the log is read from disk: the engine thread is not disturbed).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from workbench.analysis.explain import CAUSES, Explanation

# The legend's names (the plot is narrow; the full meanings are in the summary and the history).
SHORT_NAMES = {
    "mid_step": "mid-step arrival",
    "max_num_seqs": "slot (max_num_seqs)",
    "token_budget": "token budget",
    "kv_blocks": "KV blocks",
    "long_prompt_policy": "long-prompt policy",
    "other_wait": "other wait",
    "prefill": "prefill",
    "left_out": "left out of a step",
    "decode": "decode",
    "preempted": "preempted",
    "waiting_untraced": "waiting (no traces)",
    "server_before_first_token": "at the server, before token 1",
}
CAUSE_COLOURS = {
    "mid_step": "#95A5A6",
    "max_num_seqs": "#E67E22",
    "token_budget": "#F1C40F",
    "kv_blocks": "#C0392B",
    "long_prompt_policy": "#9B59B6",
    "other_wait": "#7F8C8D",
    "prefill": "#16A085",
    "left_out": "#D35400",
    "decode": "#4C9BE8",
    "preempted": "#8E44AD",
    "waiting_untraced": "#E67E22",
    "server_before_first_token": "#34495E",
}


CLICK_REACH_PX = 4  # a click this close to a segment of the tail's bar picks it
NOTHING_EXPLAINED = "Explain the current run, or open one (Runs tab), to see where the tail's time went."


class WhyView(QWidget):
    explain_requested = Signal(float)  # the percentile of the tail: the window explains the current run
    request_chosen = Signal(str)  # a request to show: the window marks its steps

    def __init__(self, history: Callable[[str], str] = lambda request_id: ""):
        super().__init__()
        self._history = history
        self.explanation: Explanation | None = None
        self._segments: list[tuple[float, float, str]] = []  # the tail bar: (start %, end %, cause)
        self.above = QDoubleSpinBox()
        self.above.setRange(1.0, 99.9)
        self.above.setValue(90.0)
        self.above.setPrefix("tail: p")
        self.above.setToolTip("The tail: requests whose arrival-to-last-token time is at or above this percentile.")
        self.explain_button = QPushButton("Explain current run")
        self.explain_button.setToolTip("Read the current run's log and its step traces, and split each request's time.")
        self.explain_button.clicked.connect(lambda: self.explain_requested.emit(self.above.value()))
        self.summary = QLabel(NOTHING_EXPLAINED)
        self.summary.setWordWrap(True)
        self.plot_widget = pg.PlotWidget()
        self.plot = self.plot_widget.getPlotItem()
        self.plot.setLabel("bottom", "share of the group's time from arrival to last token", units="%")
        self.plot.getAxis("bottom").enableAutoSIPrefix(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(x=False, y=False)
        # The legend is a row under the bars, never over them (as the live plots' legends).
        self.legend = pg.LegendItem(colCount=4, horSpacing=4, verSpacing=-8, labelTextSize="8pt", frame=False)
        self.plot.layout.addItem(self.legend, 4, 1)
        self.plot_widget.scene().sigMouseClicked.connect(self._clicked)
        self.slowest = QListWidget()
        self.slowest.setToolTip("The slowest requests: click one for its history.")
        self.slowest.setWordWrap(True)  # a narrow pane wraps an entry rather than cut its cause ("decod…")
        self.slowest.itemClicked.connect(lambda item: self.show_history(item.data(Qt.ItemDataRole.UserRole)))
        self.detail = QPlainTextEdit()
        self.detail.setReadOnly(True)
        self.detail.setPlaceholderText("A request's history: every step that touched it.")

        controls = QHBoxLayout()
        controls.addWidget(self.above)
        controls.addWidget(self.explain_button)
        controls.addStretch(1)
        # Side by side, each the tab's whole height: the tabs under the plots are wide and short.
        body = QSplitter()
        body.addWidget(self.plot_widget)
        body.addWidget(self.slowest)
        body.addWidget(self.detail)
        for index, stretch in enumerate((3, 2, 3)):
            body.setStretchFactor(index, stretch)
        self.plot_widget.setMinimumSize(160, 110)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addWidget(self.summary)
        layout.addWidget(body, 1)

    def clear(self) -> None:
        """Nothing explained: the run it explained is no longer the one shown."""
        self.explanation = None
        self._segments = []
        for part in (self.plot, self.legend, self.slowest, self.detail):
            part.clear()
        self.plot.setTitle(None)
        self.summary.setText(NOTHING_EXPLAINED)

    def show_explanation(self, explanation: Explanation, source: str) -> None:
        self.explanation = explanation
        self.plot.clear()
        self.legend.clear()
        self.slowest.clear()
        self.detail.clear()
        tail, everyone = explanation.tail, explanation.everyone
        above = f"p{explanation.above_percentile:g}"
        if not everyone.n:
            self.summary.setText(f"{source}: no finished request to explain")
            return
        rows = [(1.0, tail, f"tail (at or above {above}, n={tail.n})"), (0.0, everyone, f"all (n={everyone.n})")]
        self._segments = []
        starts = [0.0] * len(rows)  # where each bar's next segment begins
        for cause in CAUSES:
            widths = [shares.share_perc.get(cause, 0.0) for _, shares, _ in rows]
            if not any(widths):
                continue
            bar = pg.BarGraphItem(
                x0=starts, y=[y for y, _, _ in rows], height=0.6, width=widths, brush=CAUSE_COLOURS[cause], pen="w"
            )
            self.plot.addItem(bar)
            self.legend.addItem(bar, SHORT_NAMES[cause])
            self._segments.append((starts[0], starts[0] + widths[0], cause))
            starts = [start + width for start, width in zip(starts, widths)]
        self.plot.getAxis("left").setTicks([[(y, label) for y, _, label in rows]])
        self.plot.setXRange(0, 100, padding=0.02)
        self.plot.setYRange(-0.6, 1.6, padding=0)
        self.plot.setTitle(f"{source}: tail (>= {above} = {explanation.threshold_ms:,.0f} ms) and all", size="9pt")
        note = f" Not attributable: {explanation.not_attributable}." if explanation.not_attributable else ""
        self.summary.setText(
            f"Mean arrival to last token: tail {tail.e2e_mean_ms or 0:,.0f} ms (n = {tail.n}), "
            f"all {everyone.e2e_mean_ms:,.0f} ms (n = {everyone.n}). Click a segment of the tail's bar for "
            f"its slowest request's history.{note}"
        )
        for time in explanation.slowest:
            self.slowest.addItem(
                f"{time.request_id}  {1000 * time.e2e_s:,.0f} ms  {CAUSES[time.main_cause()]} "
                f"({time.main_cause_perc():.0f}%)"
            )
            self.slowest.item(self.slowest.count() - 1).setData(Qt.ItemDataRole.UserRole, time.request_id)

    def _clicked(self, event) -> None:
        if self.explanation is None or not self._segments:
            return
        point = self.plot.vb.mapSceneToView(event.scenePos())
        if abs(point.y() - 1.0) > 0.3:  # only the tail's bar
            return
        cause = self.cause_at(point.x(), self.plot.vb.viewPixelSize()[0])
        if cause is not None:
            self.show_cause(cause)

    def cause_at(self, x: float, pixel: float) -> str | None:
        """The narrowest segment of the tail bar within CLICK_REACH_PX pixels (of `pixel`
        percent each) of `x` (percent of the bar): a cause under 1% of the bar is a segment a
        pixel or two wide, between wider ones, that a click would otherwise have to hit exactly."""
        reach = CLICK_REACH_PX * pixel
        within = [(end - start, cause) for start, end, cause in self._segments if start - reach <= x <= end + reach]
        return min(within)[1] if within else None

    def show_cause(self, cause: str) -> str | None:
        """The history of the slowest request of the tail whose main cause is `cause` (its id), if any."""
        candidates = [time for time in self.explanation.tail_times if time.main_cause() == cause]
        if not candidates:
            self.detail.setPlainText(f"No request of the tail spent most of its time on: {CAUSES[cause]}.")
            return None
        slowest = max(candidates, key=lambda time: time.e2e_s)
        self.show_history(slowest.request_id)
        return slowest.request_id

    def show_history(self, request_id: str) -> None:
        seconds = next(
            (
                time.seconds
                for time in self.explanation.tail_times + self.explanation.slowest
                if time.request_id == request_id
            ),
            np.zeros(len(CAUSES)),
        )
        split = ", ".join(
            f"{CAUSES[cause]} {1000 * value:,.0f} ms" for cause, value in zip(CAUSES, seconds) if value > 1e-6
        )
        self.detail.setPlainText(f"{request_id}: {split}\n\n{self._history(request_id)}")
        self.request_chosen.emit(request_id)
