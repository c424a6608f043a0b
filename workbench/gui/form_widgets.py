"""Small helpers for the panels: number fields, each with the tooltip that explains it, and the
one way a panel hands on what its fields describe."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import SignalInstance
from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox

from engine.errors import ConfigError


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


def emit_validated(build: Callable[[], object], accepted: SignalInstance, invalid: SignalInstance, what: str) -> None:
    """Emit `accepted` with what `build` makes of the fields, or `invalid` with the ConfigError it
    raised: a slot must never raise, and a bad field is a message in the window."""
    try:
        value = build()
    except ConfigError as error:
        invalid.emit(f"{what}: {error}")
        return
    accepted.emit(value)
