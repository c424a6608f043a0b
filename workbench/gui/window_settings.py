"""What the window keeps between sessions (QSettings, in an INI file: $WORKBENCH_SETTINGS or
~/.config/workbench/settings.ini): its geometry and the Engine panel's configuration."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMainWindow

from engine import ConfigError, EngineConfig
from workbench.gui.engine_panel import EnginePanel

# Pixels a window manager adds around the window (borders; a title bar of about 30), kept free of
# the screen's available area when the window sizes itself.
WINDOW_FRAME_PX = (16, 40)


def settings() -> QSettings:
    path = os.environ.get("WORKBENCH_SETTINGS", str(Path.home() / ".config" / "workbench" / "settings.ini"))
    return QSettings(path, QSettings.Format.IniFormat)


def fit_to_screen(window: QMainWindow, width: int, height: int) -> None:
    """The preferred size, but never larger than the screen's available area less what a window
    manager adds around it (a 1280x800 laptop must still show the status bar, where every error
    appears: sized to the whole area, the title bar pushed it off the screen)."""
    screen = QGuiApplication.primaryScreen()
    if screen is not None:
        available = screen.availableGeometry()
        width = min(width, available.width() - WINDOW_FRAME_PX[0])
        height = min(height, available.height() - WINDOW_FRAME_PX[1])
    window.resize(width, height)


def restore(window: QMainWindow, engine_panel: EnginePanel) -> None:
    stored = settings()
    geometry = stored.value("geometry")
    if geometry is not None:
        window.restoreGeometry(geometry)
        fit_to_screen(window, window.width(), window.height())  # saved on a larger screen, or unframed
    saved = stored.value("engine_config")
    if saved:
        try:
            engine_panel.set_config(EngineConfig(**json.loads(saved)))
        except (ConfigError, TypeError, ValueError):
            pass  # settings from an older version: keep the defaults


def save(window: QMainWindow, engine_panel: EnginePanel) -> None:
    stored = settings()
    stored.setValue("geometry", window.saveGeometry())
    try:
        stored.setValue("engine_config", json.dumps(dataclasses.asdict(engine_panel.config())))
    except ConfigError:
        pass  # the panel holds a value that is not a configuration: keep the last one saved
    stored.sync()
