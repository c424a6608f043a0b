"""Reading the PNG plots the tests write: how many colours they hold."""

from __future__ import annotations

from PySide6.QtGui import QImage


def distinct_colours(path) -> tuple[int, int]:
    """Width of the image and the number of distinct colours on a sampled grid."""
    image = QImage(str(path))
    assert not image.isNull(), path
    colours = {image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}
    return image.width(), len(colours)
