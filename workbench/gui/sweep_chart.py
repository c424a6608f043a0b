"""A sweep's two charts, drawn one way for the window and for `workbench sweep`'s PNGs:

- throughput against p99 latency, each point labelled with the first varied setting's value (the title names it) and
  joined to the points that differ only in it (one line per value of the others, e.g. per rate):
  the batching trade-off on one chart (up and to the right is more tokens/s for a slower tail),
  with each p99's 95% interval as an error bar;
- goodput against arrival rate (when the rate was varied or searched), with the goodput target
  the search used, each point's Wilson interval as an error bar.

"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg

from workbench.gui.report_images import drawing_offscreen, export_png
from workbench.gui.theme import series_colour
from workbench.sweep import RATE_KEY, Sweep

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
        name = ", ".join(f"{key.rsplit('.', 1)[-1]}={row[key]}" for key in others)
        groups.setdefault(name, []).append(row)
    return groups


def _series(plot: pg.PlotItem, rows: list[dict], x: str, y: str, color: str, name: str, labels: bool) -> None:
    points = [row for row in rows if row[x] is not None and row[y] is not None]
    if not points:
        return
    xs = np.array([row[x] for row in points], dtype=float)
    ys = np.array([row[y] for row in points], dtype=float)
    curve = plot.plot(
        xs, ys, pen=pg.mkPen(color, width=2), symbol="o", symbolBrush=color, symbolSize=8, name=name or None
    )
    curve.sweep_rows = points  # the window opens a clicked point's run
    low = np.array(
        [row.get(f"{y}_low") if row.get(f"{y}_low") is not None else value for row, value in zip(points, ys)]
    )
    high = np.array(
        [row.get(f"{y}_high") if row.get(f"{y}_high") is not None else value for row, value in zip(points, ys)]
    )
    plot.addItem(pg.ErrorBarItem(x=xs, y=ys, top=high - ys, bottom=ys - low, beam=0, pen=pg.mkPen(color)))
    if labels:
        for row, x_value, y_value in zip(points, xs, ys):
            text = pg.TextItem(row["label"], color="#333333", anchor=(0, 1))
            text.setPos(x_value, y_value)
            plot.addItem(text)


def throughput_latency_plot(sweep: Sweep, latency: str = "tpot_p99_ms") -> pg.PlotItem:
    """Output tokens/s (x) against a p99 latency (y), every point labelled."""
    plot = pg.PlotItem()
    along = sweep.keys[0] if sweep.keys else ""
    labelled_by = f", points labelled by {along.rsplit('.', 1)[-1]}" if along else ""
    plot.setTitle(f"throughput vs {LATENCIES[latency]} ({len(sweep.rows)} points{labelled_by})", size="10pt")
    plot.setLabel("bottom", "output tokens/s")
    plot.setLabel("left", LATENCIES[latency], units="ms")
    for axis in ("left", "bottom"):
        plot.getAxis(axis).enableAutoSIPrefix(False)
    plot.addLegend(offset=(70, 10))  # top left: a trade-off curve rises to the right
    for index, (name, rows) in enumerate(_groups(sweep, along).items()):
        labelled = [{**row, "label": str(row[along]) if along else ""} for row in rows]
        _series(plot, labelled, "output_tok_s", latency, series_colour(index), name, labels=True)
    plot.getViewBox().setDefaultPadding(0.12)  # room for the labels right of the last points
    return plot


def goodput_rate_plot(sweep: Sweep, target_perc: float | None = None) -> pg.PlotItem:
    """Goodput (% of arrived requests meeting every SLO) against the arrival rate."""
    plot = pg.PlotItem()
    plot.setTitle("goodput vs arrival rate", size="10pt")
    plot.setLabel("bottom", "arrival rate", units="req/s")
    plot.setLabel("left", "requests meeting every SLO", units="%")
    for axis in ("left", "bottom"):
        plot.getAxis(axis).enableAutoSIPrefix(False)
    plot.addLegend(offset=(-10, -10))
    rows_by_rate = {
        name: sorted(
            ({**row, RATE_KEY: float(row[RATE_KEY]), "label": ""} for row in rows), key=lambda row: row[RATE_KEY]
        )
        for name, rows in _groups(sweep, RATE_KEY).items()
    }
    for index, (name, rows) in enumerate(rows_by_rate.items()):
        _series(plot, rows, RATE_KEY, "goodput_perc", series_colour(index), name, labels=False)
    if target_perc is not None:
        plot.addItem(pg.InfiniteLine(pos=target_perc, angle=0, pen=pg.mkPen("#E74C3C", style=pg.QtCore.Qt.DashLine)))
    plot.setYRange(0, 105)
    return plot


def sweep_plots(sweep: Sweep, target_perc: float | None = None) -> dict[str, pg.PlotItem]:
    """The charts this sweep has: throughput vs latency always, goodput vs rate when the rate varied."""
    plots = {"throughput_vs_latency": throughput_latency_plot(sweep)}
    if RATE_KEY in sweep.keys:
        plots["goodput_vs_rate"] = goodput_rate_plot(sweep, target_perc)
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
