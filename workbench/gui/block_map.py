"""The KV block map: one cell per block, coloured by its owner (free, free-but-cached prefix,
shared by several requests, or the request holding it); the live cache, or the cache at a step
selected in the Step panel, with the selected request's blocks outlined. On a model with
sliding-window layers, the blocks those layers hold are hatched: they are freed as the window
moves on, while the full-attention layers' blocks grow with the context."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPen
from PySide6.QtWidgets import QWidget

from workbench.backends.protocol import BLOCK_CACHED, BLOCK_FREE, BLOCK_SHARED

_OWNER_COLOURS = [QColor.fromHsv((index * 47) % 360, 150, 220) for index in range(64)]
_HATCH = QColor(0, 0, 0, 150)
_SPECIAL = {BLOCK_FREE: QColor("#3a3d42"), BLOCK_CACHED: QColor("#9B59B6"), BLOCK_SHARED: QColor("#F1C40F")}


class BlockMapView(QWidget):
    def __init__(self):
        super().__init__()
        self.owners = np.empty(0, dtype=np.int64)
        self.highlighted: set[int] = set()  # the selected request's blocks, outlined
        self.windowed = np.zeros(0, dtype=bool)  # blocks of the sliding-window layers, hatched
        self.caption = ""  # what the map shows: the live cache, or the cache at a selected step
        self.setToolTip(
            "One cell per KV block. Grey: free; purple: free but holding a reusable prefix; "
            "gold: shared by several requests; other colours: the request holding it. Hatched: held by "
            "sliding-window layers (freed as the window moves on)."
        )

    def set_owners(
        self, owners: np.ndarray, highlighted: list[int] = (), caption: str = "", windowed: np.ndarray | None = None
    ) -> None:
        self.owners, self.highlighted, self.caption = owners, set(highlighted), caption
        self.windowed = windowed if windowed is not None else np.zeros(owners.size, dtype=bool)
        self.update()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), self.palette().window())
        count = self.owners.size
        if count:
            top = painter.fontMetrics().height() + 4 if self.caption else 0  # room for the caption
            height = max(self.height() - top, 1)
            columns = max(1, int(math.sqrt(count * self.width() / height)))
            rows = math.ceil(count / columns)
            cell = max(1, min(self.width() // columns, height // max(rows, 1)))
            for index, owner in enumerate(self.owners.tolist()):
                colour = _SPECIAL.get(owner) or _OWNER_COLOURS[owner % len(_OWNER_COLOURS)]
                cell_rect = QRect(
                    (index % columns) * cell, top + (index // columns) * cell, cell - (cell > 3), cell - (cell > 3)
                )
                painter.fillRect(cell_rect, colour)
                if owner != BLOCK_FREE and self.windowed[index]:
                    painter.fillRect(cell_rect, QBrush(_HATCH, Qt.BrushStyle.BDiagPattern))
                if index in self.highlighted:
                    painter.setPen(QPen(Qt.GlobalColor.white, 2))
                    painter.drawRect(cell_rect.adjusted(1, 1, -1, -1))
            if self.caption:
                painter.setPen(self.palette().text().color())
                painter.drawText(2, painter.fontMetrics().ascent() + 2, self.caption)
        else:
            painter.setPen(self.palette().text().color())
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "no engine loaded")
        painter.end()
