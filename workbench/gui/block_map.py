"""The KV block map: one cell per block, coloured by its owner (free, free-but-cached prefix,
shared by several requests, or the request holding it)."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QWidget

from workbench.backend import BLOCK_CACHED, BLOCK_FREE, BLOCK_SHARED

_OWNER_COLOURS = [QColor.fromHsv((index * 47) % 360, 150, 220) for index in range(64)]
_SPECIAL = {BLOCK_FREE: QColor("#3a3d42"), BLOCK_CACHED: QColor("#9B59B6"), BLOCK_SHARED: QColor("#F1C40F")}


class BlockMapView(QWidget):
    def __init__(self):
        super().__init__()
        self.owners = np.empty(0, dtype=np.int64)
        self.setToolTip("One cell per KV block. Grey: free; purple: free but holding a reusable prefix; "
                        "gold: shared by several requests; other colours: the request holding it.")

    def set_owners(self, owners: np.ndarray) -> None:
        self.owners = owners
        self.update()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), self.palette().window())
        count = self.owners.size
        if count:
            columns = max(1, int(math.sqrt(count * self.width() / max(self.height(), 1))))
            rows = math.ceil(count / columns)
            cell = max(1, min(self.width() // columns, self.height() // max(rows, 1)))
            for index, owner in enumerate(self.owners.tolist()):
                colour = _SPECIAL.get(owner) or _OWNER_COLOURS[owner % len(_OWNER_COLOURS)]
                painter.fillRect(QRect((index % columns) * cell, (index // columns) * cell, cell - (cell > 3), cell - (cell > 3)), colour)
        else:
            painter.setPen(self.palette().text().color())
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "no engine loaded")
        painter.end()
