"""The memory panel: a bar of weights / KV cache / activations / other against the device's
memory, and the arithmetic behind each figure, marked measured or estimated."""

from __future__ import annotations

import html

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from engine.configuration.memory import MemoryLine
from workbench.live.memory_view import MemoryView

_COLOURS = {"weights": "#4C9BE8", "KV cache": "#9B59B6", "activations": "#E67E22", "other": "#7F8C8D"}


class MemoryBar(QWidget):
    def __init__(self):
        super().__init__()
        self.setMinimumHeight(28)
        self.lines: list[MemoryLine] = []
        self.total = 1

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        area = self.rect().adjusted(1, 1, -1, -1)
        painter.fillRect(area, self.palette().base())
        x = float(area.left())
        for line in self.lines:
            width = area.width() * line.bytes / self.total
            painter.fillRect(QRectF(x, area.top(), width, area.height()), QColor(_COLOURS.get(line.name, "#999999")))
            x += width
        painter.setPen(self.palette().text().color())
        painter.drawRect(area)
        painter.end()


class MemoryPanel(QWidget):
    def __init__(self):
        super().__init__()
        self.bar = MemoryBar()
        self.text = QLabel("Load a model to see where memory goes.")
        self.text.setTextFormat(Qt.TextFormat.RichText)
        self.text.setWordWrap(True)
        # A short tab scrolls instead of hiding the lines below the first.
        scroll = QScrollArea()
        scroll.setWidget(self.text)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.addWidget(self.bar)
        layout.addWidget(scroll, 1)

    def show_view(self, view: MemoryView) -> None:
        """A loaded engine's memory, as its view model says (workbench/live/memory_view.py)."""
        self.show_lines(
            view.lines, view.device_total, view.device, view.quality, view.kv_note, view.per_gpu, view.timing
        )

    def show_lines(
        self,
        lines: list[MemoryLine],
        device_total: int,
        device: str,
        quality: str = "",
        kv_note: str = "",
        per_gpu: list[MemoryLine] = (),
        timing: list[str] = (),
    ) -> None:
        """`quality`: what the weights' format costs against the file's own weights (the quality
        ledger's line), shown under the lines because memory and quality are one trade; `kv_note`:
        what the KV cache holds its tokens in, and why; `per_gpu`: one GPU's lines, for a
        simulated model split across several; `timing`: what a simulated GPU's times are worth
        (its serving stack's error against published runs, per kind of figure)."""
        self.bar.lines, self.bar.total = lines, max(device_total, 1)
        self.bar.update()
        used = sum(line.bytes for line in lines)
        self.text.setText(
            f"<b>{device}</b>: {used / 2**30:,.2f} GiB of {device_total / 2**30:,.1f} GiB "
            f"({100 * used / max(device_total, 1):.1f}%){_table(lines)}"
            + (f"<p><b>each GPU</b>:</p>{_table(per_gpu, gigabytes=True)}" if per_gpu else "")
            + (f"<p><b>KV cache</b>: {html.escape(kv_note, quote=False)}</p>" if kv_note else "")
            + (f"<p><b>quality</b>: {html.escape(quality, quote=False)}</p>" if quality else "")
            + (
                "<p><b>timing</b>: " + "<br>".join(html.escape(line, quote=False) for line in timing) + "</p>"
                if timing
                else ""
            )
        )

    def show_not_exposed(self, server: str) -> None:
        """A server does not say where its memory goes."""
        self.bar.lines, self.bar.total = [], 1
        self.bar.update()
        self.text.setText(
            f"<b>{server}</b>: memory not exposed by this backend (a server reports KV usage only; "
            "see the KV-cache plot)"
        )


def _table(lines: list[MemoryLine], gigabytes: bool = False) -> str:
    """The lines as table rows, each in the unit its arithmetic uses: MiB, or GB for one GPU's
    share (engine/simulation/parallel.py, as `workbench estimate --tp` prints it)."""

    def size(line: MemoryLine) -> str:
        return f"{line.bytes / 1e9:,.2f} GB" if gigabytes else f"{line.bytes / 2**20:,.1f} MiB"

    rows = "".join(
        f"<tr><td><span style='color:{_COLOURS.get(line.name, '#999')}'>■</span> {line.name}</td>"
        f"<td align='right'>{size(line)}</td><td>{'measured' if line.measured else 'estimate'}</td>"
        f"<td>{line.arithmetic}</td></tr>"
        for line in lines
    )
    return f"<table cellspacing='6'>{rows}</table>"
