"""`ElidedLabel`: a one-line label that never cuts what it says at the window's edge.

A QLabel in the status bar asks for its whole text's width; a long status ("ready: … — warming
up, compiling the decode and prefill graphs: 12 s of about 31 s; until then …") pushed past the edge of a
1,280-px window, and the end, the part that mattered, was cut off unseen. This one takes the room
it is given, ends with "…" where the text does not fit, and shows the whole text in its tooltip,
above any tooltip of its own. A label given a short form as well (`setText(text, short=...)`)
shows that where the whole text does not fit, and never less: its minimum is the short form's
width (the goodput line: "goodput 92.7%, n=41" rather than "goodput 92.7% (38 of n=4…")."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget


class ElidedLabel(QWidget):
    """`hide_when_empty`: take no room while it says nothing (the status bar's error line, which
    shares the bar's free width with the status line only while it has something to say)."""

    def __init__(self, text: str = "", parent: QWidget | None = None, hide_when_empty: bool = False):
        super().__init__(parent)
        self._text = text
        self._short = ""  # what it says where the whole text does not fit; "" elides the text
        self._note = ""  # a tooltip of its own, shown below the whole text
        self._hide_when_empty = hide_when_empty
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._update_tooltip()
        if hide_when_empty:
            self.setVisible(bool(text))

    def text(self) -> str:
        return self._text

    def setText(self, text: str, short: str = "") -> None:
        self._text, self._short = text, short
        self._update_tooltip()
        if self._hide_when_empty:
            self.setVisible(bool(text))
        self.updateGeometry()
        self.update()

    def setToolTip(self, note: str) -> None:
        self._note = note
        self._update_tooltip()

    def shown_text(self) -> str:
        """What fits in the label's width now: the text, else its short form, else the start of
        the text and "…"."""
        metrics = self.fontMetrics()
        if self._short and metrics.horizontalAdvance(self._text) > self.width():
            return self._short
        return metrics.elidedText(self._text, Qt.TextElideMode.ElideRight, self.width())

    def is_elided(self) -> bool:
        return self.shown_text() != self._text

    def sizeHint(self) -> QSize:
        metrics = self.fontMetrics()
        return QSize(metrics.horizontalAdvance(self._text), metrics.height())

    def minimumSizeHint(self) -> QSize:
        """Room for its short form, or for a few letters and "…"; none while it says nothing (it
        sits in rows that must fit an 800-pixel screen)."""
        metrics = self.fontMetrics()
        if self._short:
            return QSize(metrics.horizontalAdvance(self._short), metrics.height())
        return QSize(min(metrics.horizontalAdvance("…") * 4, self.sizeHint().width()), metrics.height())

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().windowText().color())
        painter.drawText(self.rect(), Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, self.shown_text())

    def _update_tooltip(self) -> None:
        super().setToolTip("\n".join(part for part in (self._text, self._note) if part))
