"""Dark and light looks that follow the system's colour scheme."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette

# Lines of a chart that draws one series per group (a sweep's, a replay's tags), in turn.
SERIES_COLOURS = ("#4C9BE8", "#E67E22", "#27AE60", "#9B59B6", "#C0392B", "#16A085", "#7F8C8D")


def series_colour(index: int) -> str:
    return SERIES_COLOURS[index % len(SERIES_COLOURS)]


def is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    scheme = hints.colorScheme() if hasattr(hints, "colorScheme") else Qt.ColorScheme.Unknown
    if scheme == Qt.ColorScheme.Unknown:  # no preference reported: judge by the palette
        return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128
    return scheme == Qt.ColorScheme.Dark


def apply_theme() -> None:
    """Fusion style with a palette for the current scheme, and matching plot colours."""
    app = QGuiApplication.instance()
    app.setStyle("Fusion")
    dark = is_dark()
    if dark:
        palette = QPalette()
        for role, colour in (
            (QPalette.ColorRole.Window, "#1f2226"),
            (QPalette.ColorRole.WindowText, "#e6e6e6"),
            (QPalette.ColorRole.Base, "#16181b"),
            (QPalette.ColorRole.AlternateBase, "#24272c"),
            (QPalette.ColorRole.Text, "#e6e6e6"),
            (QPalette.ColorRole.Button, "#2a2e33"),
            (QPalette.ColorRole.ButtonText, "#e6e6e6"),
            (QPalette.ColorRole.Highlight, "#3d7bd9"),
            (QPalette.ColorRole.HighlightedText, "#ffffff"),
            (QPalette.ColorRole.ToolTipBase, "#2a2e33"),
            (QPalette.ColorRole.ToolTipText, "#e6e6e6"),
        ):
            palette.setColor(role, QColor(colour))
        app.setPalette(palette)
    pg.setConfigOptions(
        background="#16181b" if dark else "w", foreground="#d0d0d0" if dark else "#202020", antialias=False
    )  # antialiased grids and fills cost most of a frame
