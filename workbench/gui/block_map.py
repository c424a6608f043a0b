"""The KV block map: one cell per block, coloured by its owner (free, free-but-cached prefix,
shared by several requests, or the request holding it); the live cache, or the cache at a step
selected in the Step panel, with the selected request's blocks outlined. On a model with
sliding-window layers, the blocks those layers hold are hatched: they are freed as the window
moves on, while the full-attention layers' blocks grow with the context. Cells are never smaller
than MIN_CELL_PX: a cache with more blocks than that fits scrolls."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPen
from PySide6.QtWidgets import QScrollArea, QWidget

from workbench.backends.protocol import BLOCK_CACHED, BLOCK_FREE, BLOCK_SHARED

_OWNER_COLOURS = [QColor.fromHsv((index * 47) % 360, 150, 220) for index in range(64)]
_HATCH = QColor(0, 0, 0, 150)
_SPECIAL = {BLOCK_FREE: QColor("#3a3d42"), BLOCK_CACHED: QColor("#9B59B6"), BLOCK_SHARED: QColor("#F1C40F")}
# Below this a cell's hatching cannot be seen (Gemma 3's 21,846 blocks came out 2 x 2 pixels in
# the tab): cells keep this size and the map scrolls instead.
MIN_CELL_PX = 6


def cell_layout(count: int, width: int, height: int) -> tuple[int, int]:
    """(columns, cell size in pixels) for `count` cells: as large as fit `width` x `height`, but
    never under MIN_CELL_PX, in which case the rows run past `height`."""
    columns = max(1, int(math.sqrt(count * width / max(height, 1))))
    cell = max(1, min(width // columns, height // max(math.ceil(count / columns), 1)))
    if cell < MIN_CELL_PX:
        cell = MIN_CELL_PX
        columns = max(1, width // cell)
    return columns, cell


class BlockMapView(QScrollArea):
    """The map, scrolling up and down when its cells would be too small to read."""

    def __init__(self):
        super().__init__()
        self.canvas = _BlockCanvas(self)
        self.setWidget(self.canvas)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setToolTip(
            "One cell per KV block. Grey: free; purple: free but holding a reusable prefix; "
            "gold: shared by several requests; other colours: the request holding it. Hatched: held by "
            "sliding-window layers (freed as the window moves on)."
        )

    def set_owners(
        self, owners: np.ndarray, highlighted: list[int] = (), caption: str = "", windowed: np.ndarray | None = None
    ) -> None:
        self.canvas.set_owners(owners, highlighted, caption, windowed)

    @property
    def owners(self) -> np.ndarray:
        return self.canvas.owners

    @property
    def highlighted(self) -> set[int]:
        return self.canvas.highlighted

    @property
    def caption(self) -> str:
        return self.canvas.caption


class _BlockCanvas(QWidget):
    def __init__(self, area: QScrollArea):
        super().__init__()
        self.area = area
        self.owners = np.empty(0, dtype=np.int64)
        self.highlighted: set[int] = set()  # the selected request's blocks, outlined
        self.windowed = np.zeros(0, dtype=bool)  # blocks of the sliding-window layers, hatched
        self.caption = ""  # what the map shows: the live cache, or the cache at a selected step

    def set_owners(
        self, owners: np.ndarray, highlighted: list[int] = (), caption: str = "", windowed: np.ndarray | None = None
    ) -> None:
        self.owners, self.highlighted, self.caption = owners, set(highlighted), caption
        self.windowed = windowed if windowed is not None else np.zeros(owners.size, dtype=bool)
        self._fit()
        self.update()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def _caption_height(self) -> int:
        return self.fontMetrics().height() + 4 if self.caption else 0

    def layout_now(self) -> tuple[int, int, int]:
        """(columns, cell, top): the cells' layout in the area's visible height."""
        top = self._caption_height()
        columns, cell = cell_layout(self.owners.size, self.width(), self.area.viewport().height() - top)
        return columns, cell, top

    def _fit(self) -> None:
        """As tall as the rows need where they run past the visible height (the area scrolls)."""
        columns, cell, top = self.layout_now()
        needed = top + math.ceil(self.owners.size / columns) * cell if cell == MIN_CELL_PX else 0
        if needed != self.minimumHeight():
            self.setMinimumHeight(needed)

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), self.palette().window())
        count = self.owners.size
        if count:
            columns, cell, top = self.layout_now()
            gap = cell > 3
            # only the rows in the region to repaint: a scrolled map of 21,846 blocks shows a few thousand
            exposed = event.rect()
            first_row = max(0, (exposed.top() - top) // cell)
            last_row = (exposed.bottom() - top) // cell + 1
            owners = self.owners[first_row * columns : last_row * columns].tolist()
            for index, owner in enumerate(owners, start=first_row * columns):
                colour = _SPECIAL.get(owner) or _OWNER_COLOURS[owner % len(_OWNER_COLOURS)]
                cell_rect = QRect((index % columns) * cell, top + (index // columns) * cell, cell - gap, cell - gap)
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
