"""A PNG of `benchmarks.decode --context ... --csv` results: decode tokens/s against context length,
this engine beside llama.cpp, one pair of lines per CSV file (drawn offscreen with pyqtgraph's
exporter):

    python -m benchmarks.curve_plot docs/data/decode-vs-context-smollm2.csv docs/data/decode-vs-context-gemma3.csv \\
        --out assets/decode-vs-context.png
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from pathlib import Path

_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="+", type=Path, help="files written by benchmarks.decode --csv")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6.QtWidgets import QApplication

    QApplication.instance() or QApplication([])
    pg.setConfigOptions(background="w", foreground="k", antialias=True)
    view = pg.GraphicsLayoutWidget()
    plot = view.addPlot(title="single-stream decode against context length (2-core CPU)")
    plot.setLogMode(x=True, y=False)
    plot.setLabel("bottom", "context (prompt tokens before the 128 decoded)")
    plot.setLabel("left", "decode tokens/s")
    plot.showGrid(x=True, y=True, alpha=0.3)
    plot.addLegend(offset=(-10, 10))
    ticks = []  # each context measured, but not two labels on top of each other (8,000 and 8,192)
    for context in sorted({float(row["context"]) for path in args.csv for row in csv.DictReader(path.open())}):
        if not ticks or context > 1.1 * 10 ** ticks[-1][0]:
            ticks.append((math.log10(context), f"{context:,.0f}"))
    plot.getAxis("bottom").setTicks([ticks, []])
    for index, path in enumerate(args.csv):
        rows = list(csv.DictReader(path.open()))
        contexts = [float(row["context"]) for row in rows]  # the axis takes their logarithm
        colour = _COLOURS[index % len(_COLOURS)]
        name = path.stem.removeprefix("decode-vs-context-")
        plot.plot(
            contexts,
            [float(row["tok_s"]) for row in rows],
            pen=pg.mkPen(colour, width=2),
            symbol="o",
            symbolBrush=colour,
            name=f"{name}: this engine (default)",
        )
        peer = [float(row["llama_cpp_tok_s"]) for row in rows if row["llama_cpp_tok_s"]]
        if peer:
            plot.plot(
                contexts,
                peer,
                pen=pg.mkPen(colour, width=2, style=pg.QtCore.Qt.DashLine),
                symbol="t",
                symbolBrush=colour,
                name=f"{name}: llama.cpp",
            )
    view.resize(1000, 520)
    exporter = pyqtgraph.exporters.ImageExporter(plot)
    exporter.parameters()["width"] = 1000
    exporter.export(str(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
