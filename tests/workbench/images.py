"""Reading the PNG plots the tests write: how many colours they hold."""

from __future__ import annotations

from PySide6.QtGui import QImage


def distinct_colours(path_or_image) -> tuple[int, int]:
    """Width of the image and the number of distinct colours on a sampled grid."""
    image = path_or_image if isinstance(path_or_image, QImage) else QImage(str(path_or_image))
    assert not image.isNull(), path_or_image
    colours = {image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}
    return image.width(), len(colours)
