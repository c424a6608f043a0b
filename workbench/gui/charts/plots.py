"""The workbench's plots, one class per plot, each owning long-lived pyqtgraph items that
`update(snapshot, x_range)` refreshes. The live window and the PNG reports of `workbench bench`
use these same classes, so each plot is drawn one way only. Lines come from the snapshot's
StepOverview, so a frame draws O(points on screen) whatever the run's length.

Time axes are seconds since the run started; every axis names its unit; percentiles show n.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from workbench.analysis.intervals import LEVEL, percentile_interval
from workbench.live.metrics_store import MetricsSnapshot
from workbench.live.rolling_percentiles import ROLLING_WINDOW, rolling_index, rolling_percentiles

MAX_SCATTER_POINTS = 3000  # per latency series: the newest all, older ones at an even stride
RECENT_POINTS = 500  # newest requests drawn one by one between two redraws of the scatter


LATENCY_UNITS = {"ttft": "ms", "e2e": "ms", "tpot": "ms/token"}
AXIS_TITLES = {"ttft": "TTFT", "e2e": "e2e", "tpot": "TPOT"}

COLORS = {
    "used": "#4C9BE8",
    "cached": "#9B59B6",
    "prefix_hits": "#16A085",
    "waiting": "#E67E22",
    "waiting_long": "#C0392B",
    "running": "#27AE60",
    "prefill": "#E67E22",
    "decode": "#4C9BE8",
    "ttft": "#4C9BE8",
    "e2e": "#E67E22",
    "tpot": "#27AE60",
    "p50": "#2ECC71",
    "p90": "#F1C40F",
    "p99": "#E74C3C",
    "slo": "#E74C3C",
    "preempt": "#C0392B",
    "reject": "#7F8C8D",
}


TITLE_LINE_PX = 18  # one line of a 9pt title


def _line(plot: pg.PlotItem, color: str, name: str) -> pg.PlotDataItem:
    """A line one pixel wide (wider pens are stroked as polygons, a fifth of a frame) that
    breaks at NaNs."""
    return plot.plot(pen=pg.mkPen(color), name=name, connect="finite")


def _new_plot(title: str, left: str, left_unit: str, bottom: str | None = None, legend_columns: int = 6) -> pg.PlotItem:
    """`bottom`: the time axis's label where it is not the run's time, "time since start (s)"
    (which only the bottom plot of the window states, so that the upper rows keep their height for data)."""
    plot = pg.PlotItem()
    set_title(plot, title)
    plot.setLabel("left", left, units=left_unit)
    if bottom is not None:
        plot.setLabel("bottom", bottom, units="s")
    # No grid: its lines, alpha-blended across every plot, were a third of a frame
    # (docs/measurements.md, "where a frame's time goes"; benchmarks/window_frames.py measures it).
    for axis in ("left", "bottom"):
        plot.getAxis(axis).enableAutoSIPrefix(False)  # "ms" must not become "kms"
        plot.getAxis(axis).setStyle(maxTickLevel=1)
    # Every series here counts or times something: no axis below zero (before any data the latency
    # axis ran from -0.4 to 0.4 ms).
    plot.vb.setLimits(yMin=0)

    # The legend is one row under the plot, never over the data, and no taller than its text: its
    # default margins and a second row took a third of a plot's height at 1280x800
    # (docs/measurements.md, "Figures behind the code").
    plot.legend = pg.LegendItem(colCount=legend_columns, horSpacing=4, labelTextSize="8pt", frame=False)
    plot.legend.layout.setContentsMargins(0, 0, 0, 0)
    plot.legend.layout.setVerticalSpacing(0)
    plot.layout.addItem(plot.legend, 4, 1)
    return plot


def set_title(plot: pg.PlotItem, text: str) -> None:
    """Titles are short and small: a title's width is its column's minimum, and two columns of
    plots must fit the centre of a 1280-pixel-wide window. Set only when changed: each setTitle
    lays the plot out again."""
    if getattr(plot, "title_text", None) != text:
        plot.title_text = text
        plot.setTitle(text, size="9pt")
        # pyqtgraph keeps 30 pixels for any title; a 9pt line needs 18.
        height = TITLE_LINE_PX * (text.count("<br>") + 1)
        plot.titleLabel.setMaximumHeight(height)
        plot.layout.setRowFixedHeight(0, height)


XRange = tuple[float, float] | None  # seconds since the run started; None: the whole run


class KvOccupancyPlot:
    def __init__(self):
        self.plot = _new_plot("KV-cache occupancy", "blocks used", "%")
        self.plot.setYRange(0, 100)
        self.used = _line(self.plot, COLORS["used"], "used")
        self.cached = _line(self.plot, COLORS["cached"], "used + cached free prefixes")
        # The run's hit rate so far, % of prompt tokens (a short name: the legend row sets the plot's width).
        self.prefix_hits = _line(self.plot, COLORS["prefix_hits"], "prefix-cache hits")

    def update(self, snapshot: MetricsSnapshot, x_range: XRange = None) -> None:
        self.used.setData(*snapshot.overview.line("kv_used_perc", x_range))
        self.cached.setData(*snapshot.overview.line("kv_used_plus_cached_perc", x_range))
        self.prefix_hits.setData(*snapshot.overview.line("prefix_hit_perc", x_range))
        size = (
            f", {snapshot.kv_cache_bytes / 2**20:,.0f} MiB" if snapshot.kv_cache_bytes else ""
        )  # a server may not say
        capacity = (
            f"{snapshot.kv_capacity_tokens:,} tokens{size}" if snapshot.kv_capacity_tokens else "capacity not exposed"
        )
        set_title(self.plot, f"KV-cache occupancy: {capacity}")


class QueueDepthPlot:
    def __init__(self):
        self.plot = _new_plot("Queue depth", "requests", "", legend_columns=3)
        self.curves = {
            key: _line(self.plot, COLORS[key], label)
            for key, label in (("waiting", "waiting"), ("waiting_long", "waiting (long)"), ("running", "running"))
        }
        self.preemptions = self.plot.plot(
            pen=None, symbol="t", symbolBrush=COLORS["preempt"], symbolSize=9, name="preempted"
        )
        self.rejections = self.plot.plot(
            pen=None, symbol="x", symbolBrush=COLORS["reject"], symbolSize=9, name="rejected"
        )

    def update(self, snapshot: MetricsSnapshot, x_range: XRange = None) -> None:
        """Markers at y = 0 where a cumulative counter went up."""
        set_title(self.plot, "Queue depth")  # it said "no step yet" while warming up
        for key, curve in self.curves.items():
            curve.setData(*snapshot.overview.line(key, x_range))
        for markers, counter in ((self.preemptions, "preemptions_total"), (self.rejections, "rejections_total")):
            times = snapshot.overview.rises(counter, x_range)
            markers.setData(times, np.zeros(times.size))


class _LatencyPoints:
    """One latency column as a scatter, kept up to date by appending: pyqtgraph styles every
    point handed to setData in Python, so new requests are added with addPoints and the whole
    set is redrawn only every RECENT_POINTS requests, or when the range or the column changes.
    Drawn: the newest (up to 2 x RECENT_POINTS) one by one, older ones at a power-of-two stride.
    Each point's data is its index into the snapshot's requests."""

    def __init__(self, plot: pg.PlotItem, color: str, name: str, tip):
        self.item = pg.ScatterPlotItem(
            symbol="o", size=5, pen=None, brush=pg.mkBrush(color), name=name, hoverable=True, tip=tip
        )
        plot.addItem(self.item)
        self._drawn: tuple[int, int] | None = None  # (first request, first one drawn one by one) at the last redraw
        self._end = 0  # requests drawn up to here

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self.item.getData()

    def clear(self) -> None:
        self.item.setData([], [])
        self._drawn, self._end = None, 0

    def update(self, finish: np.ndarray, values: np.ndarray, start: int, stop: int) -> None:
        """Draw requests [start, stop) (indices into the snapshot's requests)."""
        if (
            self._drawn is not None
            and self._drawn[0] == start
            and self._end <= stop <= self._drawn[1] + 2 * RECENT_POINTS
        ):
            self._add(finish, values, np.arange(self._end, stop))
        else:
            dense_from = max(start, stop - RECENT_POINTS)
            stride = 1 << int(np.ceil(np.log2(max((dense_from - start) / (MAX_SCATTER_POINTS - 2 * RECENT_POINTS), 1))))
            self.item.setData([], [])
            self._drawn = (start, dense_from)
            self._add(
                finish, values, np.concatenate([np.arange(start, dense_from, stride), np.arange(dense_from, stop)])
            )
        self._end = stop

    def _add(self, finish: np.ndarray, values: np.ndarray, indices: np.ndarray) -> None:
        """Append the points at `indices` that have a value."""
        indices = indices[np.isfinite(values[indices])]
        if indices.size:
            self.item.addPoints(x=finish[indices], y=values[indices], data=indices)


class LatencyPlot:
    """One point per ended request at its finish time (its TTFT, e2e or TPOT: one at a time, each on
    an axis of its own, since e2e's seconds flattened TTFT onto the zero line of a shared one),
    rolling p50/p90/p99 over the last ROLLING_WINDOW requests, and the SLO threshold. Hovering a
    point shows its request with all its latencies; each point carries its index into the
    snapshot's requests (`request_at`). Once the
    run is whole (`whole`: every request sent has ended, no traffic left) the title's percentiles
    get their 95% intervals on a second line; while requests still end they would move."""

    MODES = ("ttft", "e2e", "tpot")

    def __init__(self, mode: str = "ttft"):
        self.plot = _new_plot(
            "Per-request latency", "latency", "ms", bottom="finish time since start", legend_columns=5
        )
        self.points = {
            key: _LatencyPoints(self.plot, COLORS[key], key.upper(), self._tip) for key in ("ttft", "e2e", "tpot")
        }
        self.snapshot: MetricsSnapshot | None = None
        self._drawn: tuple | None = None
        self.rolling = {
            key: _line(self.plot, COLORS[key], f"{key} of last {ROLLING_WINDOW}") for key in ("p50", "p90", "p99")
        }
        self.slo_line = pg.InfiniteLine(
            angle=0,
            pen=pg.mkPen(COLORS["slo"], width=1.5, style=pg.QtCore.Qt.PenStyle.DashLine),
            label="SLO",
            # at the right end, above the line: at the left it covered the axis's ticks
            labelOpts={"position": 0.98, "anchors": [(1, 1), (1, 1)]},
        )
        self.plot.addItem(self.slo_line)
        self.mode = mode
        self.whole = False
        self._intervals: tuple = (None, "")  # (what they were computed on, the title's line)
        self._legend_shows = ""  # the mode the legend was made for
        # The legend as it will read from the first request on: before any, it listed every kind of
        # point and line, and its width pushed the queue plot behind a sideways scrollbar at 1280 px.
        self._show_in_legend(mode)

    def set_mode(self, mode: str) -> None:
        self.mode = mode

    def request_at(self, index: int) -> str:
        """The id of the request a point stands for."""
        return self.snapshot.request_ids[index]

    def _tip(self, x: float, y: float, data: int) -> str:
        requests, index = self.snapshot.requests, int(data)

        def ms(key: str) -> str:
            value = requests[key][index]
            return "-" if np.isnan(value) else f"{value:,.1f}"

        return (
            f"{self.snapshot.request_ids[index]} ({self.snapshot.request_tags[index]})\n"
            f"prompt {requests['prompt_tokens'][index]:,.0f} tokens, output {requests['output_tokens'][index]:,.0f} "
            "tokens\n"
            f"queue {ms('queue_ms')} ms, TTFT {ms('ttft_ms')} ms, TPOT {ms('tpot_ms')} ms/token, e2e {ms('e2e_ms')} "
            "ms\n"
            f"finished at {x:,.2f} s (click: its row and timeline)"
        )

    def update(self, snapshot: MetricsSnapshot, x_range: XRange = None) -> None:
        requests = snapshot.requests
        finish = requests["finish_s"]
        # Redrawn only when a request ended (or the mode, SLO or range changed): steps come far more often.
        drawn = (finish.size, finish[-1] if finish.size else None, self.mode, snapshot.slo, x_range, self.whole)
        if drawn == self._drawn:
            self.snapshot = snapshot
            return
        self.snapshot, self._drawn = snapshot, drawn
        key, unit = self.mode, LATENCY_UNITS[self.mode]
        self._show_in_legend(key)
        start, stop = _finished_within(finish, x_range)
        for other, points in self.points.items():
            if other == key:
                points.update(finish, requests[f"{key}_ms"], start, stop)
            else:
                points.clear()
        # Rolling percentiles over the range drawn, the title's over the whole run.
        in_range = requests[f"{key}_ms"][start:stop]
        valid = ~np.isnan(in_range)
        x, values = finish[start:stop][valid], in_range[valid]
        points = x[rolling_index(values.size)]
        for item, column in zip(self.rolling.values(), rolling_percentiles(values)):
            item.setData(points, column)
        every = snapshot.finished_latencies(key)  # the report's: finished requests only
        drawn_points = len(self.points[key].item.data)
        thinned = "" if drawn_points >= finish.size else f", {drawn_points:,} points drawn"
        if every.size:
            summary = np.percentile(every, [50, 90, 99])
            title = (
                f"{key.upper()} p50 {summary[0]:.0f} / p90 {summary[1]:.0f} / p99 {summary[2]:.0f} {unit} "
                f"(n={every.size}{thinned})"
            )
            set_title(self.plot, title + (f"<br>{self._intervals_line(every, unit)}" if self.whole else ""))
            self.plot.titleLabel.setToolTip(INTERVALS_METHOD if self.whole else "")
        else:
            set_title(self.plot, f"{key.upper()}: no request finished yet (n=0)")
        threshold = getattr(snapshot.slo, f"{key}_ms")
        self.slo_line.setVisible(threshold is not None)
        if threshold is not None:
            self.slo_line.setValue(threshold)
            self.slo_line.label.setFormat(f"SLO {key.upper()} {threshold:g} {unit}")
        axis = self.plot.getAxis("left")
        if (axis.labelText, axis.labelUnits) != (AXIS_TITLES[key], unit):
            # set on a mode change only: each setLabel lays the plot out again
            self.plot.setLabel("left", AXIS_TITLES[key], units=unit)
        self._fix_range_if_flat(in_range, threshold)

    def _show_in_legend(self, key: str) -> None:
        """The points drawn, then the rolling lines, on one row."""
        if key == self._legend_shows:
            return
        self._legend_shows = key
        legend = self.plot.legend
        legend.clear()
        legend.addItem(self.points[key].item, key.upper())
        for percentile, line in self.rolling.items():  # read in a row: "p50 of last 200", "p90", "p99"
            legend.addItem(line, f"{percentile} of last {ROLLING_WINDOW}" if percentile == "p50" else percentile)

    def _intervals_line(self, values: np.ndarray, unit: str) -> str:
        """Computed once per run and mode, not on every zoom or pan of a whole run: three
        binomial tables over n and a sort of every request's latency."""
        key = (values.size, float(values.sum()), unit)
        if self._intervals[0] != key:
            self._intervals = (key, percentile_intervals_line(values, unit))
        return self._intervals[1]

    def _fix_range_if_flat(self, column: np.ndarray, threshold: float | None) -> None:
        """With no points, or points all (nearly) equal, auto-range zooms into a sliver around them
        and prints overlapping ticks (1499.8 / 1500.0 / 1500.4); such a plot gets 0 to a little
        above its highest value or SLO instead. Otherwise the plot ranges itself."""
        values = column[~np.isnan(column)]
        highest = max(values.max() if values.size else 0.0, threshold or 0.0)
        if values.size and values.max() - values.min() > 0.05 * highest:
            self.plot.enableAutoRange(axis="y")
            return
        self.plot.setYRange(0.0, highest * 1.25 if highest > 0 else 1000.0, padding=0)


def _finished_within(finish: np.ndarray, x_range: XRange) -> tuple[int, int]:
    """Requests (in finishing order) that ended inside the range."""
    if x_range is None:
        return 0, finish.size
    return int(np.searchsorted(finish, x_range[0], side="left")), int(np.searchsorted(finish, x_range[1], side="right"))


class ThroughputPlot:
    def __init__(self):
        self.plot = _new_plot("Throughput", "tokens/s", "")
        self.prefill = _line(self.plot, COLORS["prefill"], "prefill")
        self.decode = _line(self.plot, COLORS["decode"], "decode")

    def update(self, snapshot: MetricsSnapshot, x_range: XRange = None) -> None:
        self.prefill.setData(*snapshot.overview.line("prefill_tok_s", x_range))
        self.decode.setData(*snapshot.overview.line("decode_tok_s", x_range))
        set_title(self.plot, f"Throughput (sliding window {snapshot.window_s:g} s)")


SPECULATING_RIGHT_AXIS = "decode seqs; proposed, accepted tokens"


class BatchCompositionPlot:
    """Prefill tokens (hundreds) on the left axis, decode sequences (a few) on the right one: on
    a shared axis decode would be a flat line. With speculative decoding, the tokens the decodes
    proposed and those accepted are on the right axis too, and the title gives the acceptance
    rate and the tokens each decode row emitted, over what is shown."""

    def __init__(self):
        self.plot = _new_plot("Batch composition per step", "prefill", "tokens/step", bottom="time since start")
        self.prefill = _line(self.plot, COLORS["prefill"], "prefill tokens (left)")
        self.decode_view = pg.ViewBox()
        self.decode_view.setParentItem(self.plot)
        self.decode_view.setXLink(self.plot.vb)
        self.plot.showAxis("right")
        right = self.plot.getAxis("right")
        right.linkToView(self.decode_view)
        right.setLabel("decode", units="seqs/step")
        right.enableAutoSIPrefix(False)
        right.setPen(pg.mkPen(COLORS["decode"]))
        self.plot.vb.sigResized.connect(lambda view: self.decode_view.setGeometry(view.geometry()))
        self.decode_view.setLimits(yMin=0)
        self.decode = pg.PlotDataItem(pen=pg.mkPen(COLORS["decode"]), connect="finite")
        self.decode_view.addItem(self.decode)
        self.plot.legend.addItem(self.decode, "decode sequences (right)")
        self.speculation = {}
        for name, style in (
            ("proposed_tokens", pg.QtCore.Qt.PenStyle.DotLine),
            ("accepted_tokens", pg.QtCore.Qt.PenStyle.DashLine),
        ):
            line = pg.PlotDataItem(pen=pg.mkPen(COLORS["decode"], style=style), connect="finite")
            self.decode_view.addItem(line)
            self.speculation[name] = line
        self._in_legend = False  # the speculation lines join the legend once a step proposed

    def update(self, snapshot: MetricsSnapshot, x_range: XRange = None) -> None:
        self.prefill.setData(*snapshot.overview.line("prefill_tokens", x_range))
        time_s, decodes = snapshot.overview.line("decode_tokens", x_range)
        self.decode.setData(time_s, decodes)
        lines = {}
        for name, line in self.speculation.items():  # each its own times: a series breaks where it has gaps
            line_time_s, lines[name] = snapshot.overview.line(name, x_range)
            line.setData(line_time_s, lines[name])
        # It said "no step yet" while warming up; with speculation, what it gained over the range.
        set_title(self.plot, "Batch composition per step" + speculation_summary(decodes, *lines.values()))
        if not self._in_legend and np.nansum(lines["proposed_tokens"]) > 0:
            for name, label in (("proposed_tokens", "proposed tokens"), ("accepted_tokens", "accepted tokens")):
                self.plot.legend.addItem(self.speculation[name], f"{label} (right)")
            # The right axis counts tokens too now: it says so (it read "decode (seqs/step)").
            self.plot.getAxis("right").setLabel(SPECULATING_RIGHT_AXIS, units="per step")
            self._in_legend = True


def speculation_summary(decodes: np.ndarray, proposed: np.ndarray, accepted: np.ndarray) -> str:
    """ ": 42% of 1,204 proposed accepted, 1.9 tokens per decode" over the points drawn, or "" when
    nothing was proposed. (A long range's points are bin averages: the ratios stay right.)"""
    total_proposed = float(np.nansum(proposed))
    if total_proposed <= 0:
        return ""
    rows, total_accepted = float(np.nansum(decodes)), float(np.nansum(accepted))
    per_decode = (rows + total_accepted) / rows if rows else 0.0
    return (
        f": {100 * total_accepted / total_proposed:.0f}% of proposed tokens accepted, "
        f"{per_decode:.2f} tokens per decode"
    )


def draw_ghost(live: pg.PlotItem, baseline: pg.PlotItem) -> list[pg.PlotDataItem]:
    """Faded copies of a plot's lines and points, drawn from `baseline` (the same plot class fed a
    past run) under the live ones, outside the legend; returns them for removal."""
    ghosts = []
    for item in baseline.listDataItems():
        x, y = item.getData()
        if x is None or len(x) == 0:
            continue
        if isinstance(item, pg.ScatterPlotItem):
            symbol, size, pen, brush = (
                item.opts["symbol"],
                item.opts["size"],
                None,
                _faded(pg.mkBrush(item.opts["brush"])),
            )
        else:
            options = item.opts
            symbol, size = options["symbol"], options["symbolSize"]
            pen = _faded(pg.mkPen(options["pen"])) if options["pen"] is not None else None
            brush = _faded(pg.mkBrush(options["symbolBrush"])) if symbol else None
        ghost = pg.PlotDataItem(
            x, y, pen=pen, connect="finite", symbol=symbol, symbolSize=size, symbolPen=None, symbolBrush=brush
        )
        ghost.setZValue(-10)
        live.vb.addItem(ghost)  # the view box, not the plot: ghosts stay out of the legend
        ghosts.append(ghost)
    return ghosts


def _faded(pen_or_brush):
    """The same pen or brush, mostly transparent."""
    colour = pen_or_brush.color()
    colour.setAlpha(70)
    pen_or_brush.setColor(colour)
    return pen_or_brush


INTERVALS_METHOD = (
    f"{LEVEL:.0%} intervals of each percentile from the order statistics of the n requests (distribution-free), "
    "as in report.json; ≥ marks a percentile too high for n requests to bound above (a p99 needs 368)"
)


def percentile_intervals_line(values: np.ndarray, unit: str) -> str:
    """The 95% intervals of p50, p90 and p99 over one value per request (INTERVALS_METHOD)."""
    if values.size < 2:
        return f"no interval from n={values.size}"
    bounds = []
    for q in (50, 90, 99):
        interval = percentile_interval(values, q)
        # No thousands commas: titles are narrow.
        if interval.identified:
            bounds.append(f"p{q} {interval.low:.0f}–{interval.high:.0f}")
        elif interval.low is not None:
            bounds.append(f"p{q} ≥{interval.low:.0f}")
        else:
            bounds.append(f"p{q} ?")
    return f"{LEVEL:.0%}: " + " / ".join(bounds) + f" {unit}"


def percentile_summary(snapshot: MetricsSnapshot, key: str) -> str:
    """p50 / p99 of one latency column over finished requests, with n."""
    values = snapshot.finished_latencies(key)
    if not values.size:
        return "n=0"
    p50, p99 = np.percentile(values, [50, 99])
    return f"p50 {p50:.0f} / p99 {p99:.0f} (n={values.size})"


# The plots drawn from engine steps, by their titles' first words: until the first step they say
# why none has come (the engine warming up).
PER_STEP_PLOTS = {
    "kv_occupancy": "KV-cache occupancy",
    "queue_depth": "Queue depth",
    "throughput": "Throughput",
    "batch_composition": "Batch composition",
}

# The backend capability each plot needs (workbench/backends/protocol.py); latency and throughput are
# measured on the client or from the server's token counters, so every backend has them.
PLOT_NEEDS = {  # plot: (capability, what it shows)
    "kv_occupancy": ("kv_cache", "KV-cache occupancy"),
    "queue_depth": ("queues", "Queue depth"),
    "batch_composition": ("batch_composition", "Batch composition per step"),
}


def show_not_exposed(plot: pg.PlotItem, what: str) -> None:
    """Empty the plot and say why, instead of drawing zeros."""
    for item in plot.listDataItems():
        item.setData([], [])
    set_title(plot, f"{what}: not exposed by this backend")


def all_plots() -> dict[str, object]:
    """One of each plot, keyed by the file stem its PNG report uses."""
    return {
        "kv_occupancy": KvOccupancyPlot(),
        "queue_depth": QueueDepthPlot(),
        "latency": LatencyPlot(),
        "throughput": ThroughputPlot(),
        "batch_composition": BatchCompositionPlot(),
    }
