"""A sweep's two charts, drawn one way for the window and for `workbench sweep`'s PNGs:

- throughput against p99 latency, each point labelled with the first varied setting's value (the title names it) and
  joined to the points that differ only in it (one line per value of the others, e.g. per rate):
  the batching trade-off on one chart (up and to the right is more tokens/s for a slower tail),
  with each p99's 95% interval and each throughput's spread over time blocks as error bars (a p99
  the run cannot bound above gets an arrow to the top);
- goodput against arrival rate (when the rate was varied or searched), with the goodput target
  the search used, each point's Clopper-Pearson interval as an error bar.

Neither chart invents a difference: two points whose intervals overlap on both axes are joined by
a dashed line (the legend says so), a solid one only where they are apart on one axis at least;
and an axis spans at least MIN_SPAN of its largest value, so that 0.0008 tok/s between two
equal points does not fill the chart.

"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg

from workbench.analysis.stated_error import kind_of
from workbench.analysis.sweep import RATE_KEY, Sweep, describe_settings
from workbench.gui.charts.plots import set_title
from workbench.gui.charts.report_images import drawing_offscreen, export_png
from workbench.gui.charts.theme import series_colour

MIN_SPAN = 0.2  # an axis's shortest span, as a fraction of its largest value
LATENCIES = {
    "tpot_p99_ms": "p99 time per output token",
    "ttft_p99_ms": "p99 time to first token",
    "e2e_p99_ms": "p99 end-to-end latency",
}


def _groups(sweep: Sweep, along: str) -> dict[str, list[dict]]:
    """Rows grouped by every varied setting except `along`, each group in sweep order."""
    others = [key for key in sweep.keys if key != along]
    groups: dict[str, list[dict]] = {}
    for row in sweep.rows:
        name = describe_settings({key: row[key] for key in others})
        groups.setdefault(name, []).append(row)
    return groups


def _ends(rows: list[dict], name: str, values: np.ndarray, unbounded: float) -> tuple[np.ndarray, np.ndarray]:
    """Each point's interval on one axis: its own value where the row has no interval, `unbounded`
    above where the interval has no upper end (a p99 of fewer than 368 requests)."""
    low = np.array(
        [row.get(f"{name}_low") if row.get(f"{name}_low") is not None else v for row, v in zip(rows, values)]
    )
    high = np.array(
        [
            v
            if row.get(f"{name}_low") is None and row.get(f"{name}_high") is None
            else row[f"{name}_high"]
            if row.get(f"{name}_high") is not None
            else unbounded
            for row, v in zip(rows, values)
        ]
    )
    return low, high


def _n_label(row: dict) -> str:
    """ "n=40": the requests a goodput share is of."""
    return f"n={row['goodput_n']:.0f}" if row.get("goodput_n") is not None else ""


def _apart(first: tuple[float, float], second: tuple[float, float]) -> bool:
    return first[1] < second[0] or second[1] < first[0]


# Titles in short lines: one long line would make a chart wider than the window's Sweep view and
# push the second chart off screen.
OVERLAP_NOTE = "<br>dashed: neighbours' 95% intervals overlap"


def _series(
    plot: pg.PlotItem, rows: list[dict], x: str, y: str, color: str, name: str, labels: bool, x_estimated: bool
) -> int:
    """The points, their error bars and the lines joining neighbours; returns how many of those
    lines are dashed (`x_estimated`: x is a measured figure, not a setting)."""
    points = [row for row in rows if row[x] is not None and row[y] is not None]
    if not points:
        return 0
    xs = np.array([row[x] for row in points], dtype=float)
    ys = np.array([row[y] for row in points], dtype=float)
    curve = plot.plot(xs, ys, pen=None, symbol="o", symbolBrush=color, symbolSize=8, name=name or None)
    curve.sweep_rows = points  # the window opens a clicked point's run
    top = float(ys.max()) * 1.5  # where an unbounded interval's bar ends
    (y_low, y_high), (x_low, x_high) = _ends(points, y, ys, top), _ends(points, x, xs, float(xs.max()))
    plot.addItem(
        pg.ErrorBarItem(
            x=xs,
            y=ys,
            top=y_high - ys,
            bottom=ys - y_low,
            left=xs - x_low,
            right=x_high - xs,
            beam=0,
            pen=pg.mkPen(color),
        )
    )
    dashed = 0
    for index in range(len(points) - 1):  # a line joins neighbours; dashed where nothing tells them apart
        step = slice(index, index + 2)
        apart = _apart(*zip(y_low[step], y_high[step])) or (x_estimated and _apart(*zip(x_low[step], x_high[step])))
        style = pg.QtCore.Qt.PenStyle.SolidLine if apart else pg.QtCore.Qt.PenStyle.DashLine
        plot.plot(xs[step], ys[step], pen=pg.mkPen(color, width=2, style=style))
        dashed += not apart
    if labels:
        for row, x_value, y_value in zip(points, xs, ys):
            text = pg.TextItem(row["label"], color="#333333", anchor=(0, 1))
            text.setPos(x_value, y_value)
            plot.addItem(text)
    return dashed


def _simulated_note(sweep: Sweep, axes: dict[str, str]) -> str:
    """Title lines for points run on simulated GPUs: per region the points stood in, each axis's
    figure's measured error there ("simulated (vllm-0.6.0, busy load):", then "x ±8%, y ±9%"; an
    axis no published run checks there: "unchecked"; `axes`: axis -> the report metric it draws),
    so that a simulated trade-off is not read as exact. Nothing for real runs."""
    lines = []
    for errors in sweep.simulated_errors.values():
        by_kind = {error.kind: error.median_abs_perc for error in errors}
        load = errors[0].where.rpartition(", ")[2]  # "busy load": where points of one stack differ
        worth = [
            f"{axis} " + ("unchecked" if by_kind.get(kind_of(metric)) is None else f"±{by_kind[kind_of(metric)]:.0f}%")
            for axis, metric in axes.items()
        ]
        where = f"{errors[0].stack}, {load}" if load else errors[0].stack
        lines.append(f"<br>simulated ({where}):<br>{', '.join(worth)}")  # two short lines: 360-px charts
    return "".join(lines)


def throughput_latency_plot(sweep: Sweep, latency: str = "tpot_p99_ms") -> pg.PlotItem:
    """Output tokens/s (x) against a p99 latency (y), every point labelled."""
    plot = pg.PlotItem()
    along = sweep.keys[0] if sweep.keys else ""
    labelled_by = f", points labelled by {along.rsplit('.', 1)[-1]}" if along else ""
    title = f"throughput vs {LATENCIES[latency]}<br>{len(sweep.rows)} points{labelled_by}"
    plot.setLabel("bottom", "output tokens/s")
    plot.setLabel("left", LATENCIES[latency], units="ms")
    for axis in ("left", "bottom"):
        plot.getAxis(axis).enableAutoSIPrefix(False)
    plot.addLegend(offset=(70, 10))  # top left: a trade-off curve rises to the right
    dashed = 0
    for index, (name, rows) in enumerate(_groups(sweep, along).items()):
        labelled = [{**row, "label": str(row[along]) if along else ""} for row in rows]
        dashed += _series(plot, labelled, "output_tok_s", latency, series_colour(index), name, True, x_estimated=True)
    note = _simulated_note(sweep, {"x": "output_tok_s", "y": latency})
    set_title(plot, title + (OVERLAP_NOTE if dashed else "") + note)  # a row as tall as its lines
    plot.getViewBox().setDefaultPadding(0.12)  # room for the labels right of the last points
    _at_least_min_span(plot, sweep.rows, "output_tok_s", latency)
    return plot


def _at_least_min_span(plot: pg.PlotItem, rows: list[dict], x: str, y: str) -> None:
    """An axis whose values (and interval ends) span less than MIN_SPAN of the largest gets that
    span around their middle; the others range themselves."""
    for axis, name in (("x", x), ("y", y)):
        values = [row[key] for row in rows for key in (name, f"{name}_low", f"{name}_high") if row.get(key) is not None]
        if not values:
            continue
        low, high = min(values), max(values)
        span = MIN_SPAN * max(abs(low), abs(high))
        if high - low < span:
            middle = (low + high) / 2
            getattr(plot, f"set{axis.upper()}Range")(middle - span / 2, middle + span / 2, padding=0.05)


def goodput_rate_plot(sweep: Sweep, target_perc: float | None = None) -> pg.PlotItem:
    """Goodput (% of arrived requests meeting every SLO) against the arrival rate, each point
    labelled with its n (the requests arrived)."""
    plot = pg.PlotItem()

    plot.setLabel("bottom", "arrival rate", units="req/s")
    plot.setLabel("left", "requests meeting every SLO", units="%")
    for axis in ("left", "bottom"):
        plot.getAxis(axis).enableAutoSIPrefix(False)
    plot.addLegend(offset=(-10, -10))
    rows_by_rate = {
        name: sorted(
            ({**row, RATE_KEY: float(row[RATE_KEY]), "label": _n_label(row)} for row in rows),
            key=lambda row: row[RATE_KEY],
        )
        for name, rows in _groups(sweep, RATE_KEY).items()
    }
    dashed = sum(
        _series(plot, rows, RATE_KEY, "goodput_perc", series_colour(index), name, True, x_estimated=False)
        for index, (name, rows) in enumerate(rows_by_rate.items())
    )
    # Goodput counts the requests within their SLOs: its error is the latencies' error.
    note = _simulated_note(sweep, {"TTFT": "ttft_p99_ms", "TPOT": "tpot_p99_ms"})
    set_title(plot, "goodput vs arrival rate" + (OVERLAP_NOTE if dashed else "") + note)
    plot.getViewBox().setDefaultPadding(0.12)  # room for the "n=…" labels right of the last points
    if target_perc is not None:
        plot.addItem(
            pg.InfiniteLine(
                pos=target_perc,
                angle=0,
                pen=pg.mkPen("#E74C3C", style=pg.QtCore.Qt.DashLine),
                label=f"target {target_perc:g}%",
                labelOpts={"position": 0.05, "color": "#E74C3C"},
            )
        )
    plot.setYRange(0, 105)
    return plot


def sweep_plots(sweep: Sweep, target_perc: float | None = None) -> dict[str, pg.PlotItem]:
    """The charts this sweep has: throughput vs latency always, goodput vs rate when the rate varied
    (with the goodput target: `target_perc`, or the one the sweep's rate search wrote down)."""
    plots = {"throughput_vs_latency": throughput_latency_plot(sweep)}
    if RATE_KEY in sweep.keys:
        plots["goodput_vs_rate"] = goodput_rate_plot(
            sweep, target_perc if target_perc is not None else sweep.target_perc
        )
    return plots


def export_sweep_images(
    sweep: Sweep, out_dir: Path, target_perc: float | None = None, width: int = 1000, height: int = 600
) -> list[Path]:
    """The sweep's charts as PNGs in out_dir, drawn offscreen; `target_perc`: a rate search's goodput target."""
    drawing_offscreen(antialias=True)
    return [
        export_png(plot, out_dir / f"{name}.png", width, height)
        for name, plot in sweep_plots(sweep, target_perc).items()
    ]
