"""A replay's per-request chart: each request's end-to-end latency in the original run (x) against
its replay (y), one point per request that finished in both, coloured by tag, with the diagonal
where nothing changed: below it the replay was faster."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg

from workbench.gui.charts.report_images import drawing_offscreen, export_png
from workbench.gui.charts.theme import series_colour


def per_request_plot(rows: list[dict]) -> pg.PlotItem:
    """`rows` as workbench/analysis/replay.py's per_request_rows gives them."""
    paired = [row for row in rows if row["original_e2e_ms"] is not None and row["replay_e2e_ms"] is not None]
    plot = pg.PlotItem()
    plot.setTitle(f"end-to-end latency per request, original vs replay (n = {len(paired)})", size="10pt")
    plot.setLabel("bottom", "original run", units="ms")
    plot.setLabel("left", "replay", units="ms")
    for axis in ("left", "bottom"):
        plot.getAxis(axis).enableAutoSIPrefix(False)
    plot.addLegend(offset=(70, 10))
    tags = sorted({row["tag"] for row in paired})
    for index, tag in enumerate(tags):
        mine = [row for row in paired if row["tag"] == tag]
        color = series_colour(index)
        plot.plot(
            [row["original_e2e_ms"] for row in mine],
            [row["replay_e2e_ms"] for row in mine],
            pen=None,
            symbol="o",
            symbolSize=5,
            symbolBrush=color,
            symbolPen=None,
            name=f"{tag} (n = {len(mine)})",
        )
    if paired:
        top = float(np.max([[row["original_e2e_ms"], row["replay_e2e_ms"]] for row in paired]))
        plot.plot([0, top], [0, top], pen=pg.mkPen("#7F8C8D", style=pg.QtCore.Qt.DashLine), name="no change")
    return plot


def export_per_request_image(rows: list[dict], path: Path, width: int = 900, height: int = 700) -> Path:
    drawing_offscreen(antialias=True)
    return export_png(per_request_plot(rows), path, width, height)
