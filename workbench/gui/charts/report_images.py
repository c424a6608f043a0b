"""PNG images of a run's plots, drawn offscreen by the same plot classes the live window uses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from workbench.live.metrics_store import MetricsStore
from workbench.runs.run_log import RunLog


def drawing_offscreen(antialias: bool) -> None:
    """A Qt application to draw pictures in, offscreen where there is no display (CI), white."""
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # headless machines and CI
    import pyqtgraph as pg
    from PySide6.QtWidgets import QApplication

    QApplication.instance() or QApplication([])
    pg.setConfigOptions(background="w", foreground="k", antialias=antialias)


def export_png(plot, path: Path, width: int, height: int) -> Path:
    """One pyqtgraph PlotItem as a PNG `width` pixels wide, laid out at width x height."""
    import pyqtgraph as pg
    import pyqtgraph.exporters

    view = pg.GraphicsLayoutWidget()
    view.addItem(plot)
    view.resize(width, height)
    exporter = pyqtgraph.exporters.ImageExporter(plot)
    exporter.parameters()["width"] = width
    exporter.export(str(path))
    view.close()
    return path


def export_plot_images(log: RunLog, out_dir: Path, width: int = 1200, height: int = 500) -> list[Path]:
    return list(plot_images_one_by_one(log, out_dir, width, height))


def plot_images_one_by_one(log: RunLog, out_dir: Path, width: int = 1200, height: int = 500) -> Iterator[Path]:
    """Each plot's PNG, drawn as the iteration reaches it: the window draws one per turn of its
    event loop (on its own thread, as Qt drawing must be), so that saving never freezes it."""
    drawing_offscreen(antialias=False)  # antialiased grids and fills cost most of a frame
    import pyqtgraph as pg

    from workbench.gui.charts.plots import all_plots

    snapshot = MetricsStore.from_run_log(log).snapshot()
    plots = all_plots()
    plots["latency"].whole = log.complete  # a finished run's percentiles with their intervals
    for name, plot in plots.items():
        plot.update(snapshot)
        if not plot.plot.getAxis("bottom").labelText:  # the window states the run's time once; each picture does
            plot.plot.setLabel("bottom", "time since start", units="s")
        for item in plot.plot.listDataItems():  # a picture is drawn once: lines as wide as reads best
            if item.opts["pen"] is not None:
                item.setPen(pg.mkPen(pg.mkPen(item.opts["pen"]).color(), width=2))
        yield export_png(plot.plot, out_dir / f"{name}.png", width, height)
