"""Small constructors for the panels' number fields, each with the tooltip that explains it."""

from __future__ import annotations

from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox


def int_box(minimum: int, maximum: int, value: int, tip: str, step: int = 1) -> QSpinBox:
    box = QSpinBox()
    box.setRange(minimum, maximum)
    box.setValue(value)
    box.setSingleStep(step)
    box.setToolTip(tip)
    return box


def float_box(minimum: float, maximum: float, value: float, tip: str, decimals: int = 2) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(minimum, maximum)
    box.setDecimals(decimals)
    box.setValue(value)
    box.setToolTip(tip)
    return box
