"""PNG images of a run's plots, drawn offscreen by the same plot classes the live window uses."""

from __future__ import annotations

import os
from pathlib import Path

from workbench.metrics_store import MetricsStore
from workbench.run_log import RunLog


def export_plot_images(log: RunLog, out_dir: Path, width: int = 1200, height: int = 500) -> list[Path]:
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # headless machines and CI
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6.QtWidgets import QApplication

    from workbench.gui.plots import all_plots

    QApplication.instance() or QApplication([])
    pg.setConfigOptions(
        background="w", foreground="k", antialias=False
    )  # antialiased grids and fills cost most of a frame
    snapshot = MetricsStore.from_run_log(log).snapshot()
    written = []
    plots = all_plots()
    plots["latency"].whole = log.complete  # a finished run's percentiles with their intervals
    for name, plot in plots.items():
        plot.update(snapshot)
        if not plot.plot.getAxis("bottom").labelText:  # the window states the run's time once; each picture does
            plot.plot.setLabel("bottom", "time since start", units="s")
        for item in plot.plot.listDataItems():  # a picture is drawn once: lines as wide as reads best
            if item.opts["pen"] is not None:
                item.setPen(pg.mkPen(pg.mkPen(item.opts["pen"]).color(), width=2))
        view = pg.GraphicsLayoutWidget()
        view.addItem(plot.plot)
        view.resize(width, height)
        exporter = pyqtgraph.exporters.ImageExporter(plot.plot)
        exporter.parameters()["width"] = width
        path = out_dir / f"{name}.png"
        exporter.export(str(path))
        written.append(path)
        view.close()
    return written
