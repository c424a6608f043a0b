"""Small helpers for the panels: number fields and choice boxes that neither change under a
passing mouse wheel nor mangle typed text in silence, each with the tooltip that explains it, and
the one way a panel hands on what its fields describe."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, SignalInstance
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QFormLayout, QSpinBox, QWidget

from engine.errors import ConfigError


class _WheelOnlyWhenFocused:
    """Scrolling the controls column must not change the fields the pointer passes over (arrival
    poisson became closed_loop): a wheel turns a field only once it has been clicked, otherwise
    the column scrolls."""

    def _take_focus_by_click(self) -> None:
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    def wheelEvent(self, event) -> None:
        if self.hasFocus():
            super().wheelEvent(event)
        else:
            event.ignore()  # to the scroll area


class _SaysWhatItRefused(_WheelOnlyWhenFocused):
    """A spin box silently drops the keys it cannot take ("1e12" became 112, "-5" became 5). This
    one keeps what was typed; if the text is no number in range when editing ends, the box goes
    back to its last value and remembers the text, and the panel refuses the next Apply or Start
    with a message naming the field (`refused_typing`). An emptied field is refused too (it used
    to be refilled in silence and the run started)."""

    refused_text: str | None = None  # the text refused since the last press; None: nothing refused

    def _keep_typed_text(self) -> None:
        self._take_focus_by_click()
        self.setKeyboardTracking(False)  # the value changes when editing ends, not at every key
        self.lineEdit().textEdited.connect(self._forget_refusal)

    def _forget_refusal(self, _text: str) -> None:
        self.refused_text = None

    def validate(self, text: str, position: int):
        state, text_out, position_out = super().validate(text, position)
        if state is QValidator.State.Invalid:
            return QValidator.State.Intermediate, text, position  # kept, to be refused by name
        return state, text_out, position_out

    def fixup(self, text: str):
        self.refused_text = text  # editing ended on text that is no value: Qt goes back to the last one
        return super().fixup(text)


class IntBox(_SaysWhatItRefused, QSpinBox):
    def __init__(self):
        super().__init__()
        self._keep_typed_text()


class FloatBox(_SaysWhatItRefused, QDoubleSpinBox):
    def __init__(self):
        super().__init__()
        self._keep_typed_text()


class ChoiceBox(_WheelOnlyWhenFocused, QComboBox):
    def __init__(self):
        super().__init__()
        self._take_focus_by_click()


def int_box(minimum: int, maximum: int, value: int, tip: str, step: int = 1) -> IntBox:
    box = IntBox()
    box.setRange(minimum, maximum)
    box.setValue(value)
    box.setSingleStep(step)
    box.setToolTip(tip)
    return box


def float_box(minimum: float, maximum: float, value: float, tip: str, decimals: int = 2) -> FloatBox:
    box = FloatBox()
    box.setRange(minimum, maximum)
    box.setDecimals(decimals)
    box.setValue(value)
    box.setToolTip(tip)
    return box


def choice_box(items: list[str], tip: str = "") -> ChoiceBox:
    box = ChoiceBox()
    box.addItems(items)
    box.setToolTip(tip)
    return box


def refused_typing(panel: QWidget) -> str:
    """The first field of `panel` whose typed text was refused since, named by its form label, as
    a message (and the refusal forgotten: the next press goes ahead with the value shown); ""."""
    for form in panel.findChildren(QFormLayout):
        for row in range(form.rowCount()):
            item = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
            box = item.widget() if item is not None else None
            if isinstance(box, _SaysWhatItRefused) and box.refused_text is not None and box.isVisibleTo(panel):
                label = form.labelForField(box)
                kind = "whole number" if isinstance(box, QSpinBox) else "number"
                text, box.refused_text = box.refused_text, None
                return (
                    f"{label.text() if label else 'a field'}: {repr(text) if text else 'empty'} is not a {kind} from "
                    f"{box.textFromValue(box.minimum())} to {box.textFromValue(box.maximum())}; the field went back "
                    f"to {box.text()}: check it and press again"
                )
    return ""


def emit_validated(
    build: Callable[[], object],
    accepted: SignalInstance,
    invalid: SignalInstance,
    what: str,
    panels: tuple[QWidget, ...] = (),
) -> None:
    """Emit `accepted` with what `build` makes of the fields, or `invalid` with the ConfigError it
    raised or the typing a field of `panels` refused (only the fields this press reads: a refusal
    elsewhere must not block it): a slot must never raise, and a bad field is a message in the
    window."""
    try:
        if refused := next(filter(None, map(refused_typing, panels)), ""):
            raise ConfigError(refused)
        value = build()
    except ConfigError as error:
        invalid.emit(f"{what}: {error}")
        return
    accepted.emit(value)
