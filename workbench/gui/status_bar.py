"""The main window's status bar: what is loaded and its stage, the load's progress and its Cancel,
the traffic's state, and the last error."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QStatusBar

from workbench.gui.elided_label import ElidedLabel


def build_status_bar(
    bar: QStatusBar, cancel_load: Callable[[], None]
) -> tuple[QProgressBar, ElidedLabel, ElidedLabel, QLabel, QPushButton]:
    """(progress, stage, error label, traffic label, Cancel load button), laid out in `bar`."""
    progress = QProgressBar()
    progress.setRange(0, 100)
    progress.setMaximumWidth(260)
    stage = ElidedLabel("starting")
    # Errors cut at the window's edge changed their meaning ("went back to 2" for 256): elided,
    # whole in the tooltip, like the status line.
    error_label = ElidedLabel("", hide_when_empty=True)
    error_label.setStyleSheet("color: #e74c3c")
    traffic_label = QLabel("traffic: idle")
    cancel_button = QPushButton("Cancel load")
    cancel_button.setToolTip("Stop the load at its next stage; the engine loaded before keeps serving.")
    cancel_button.clicked.connect(cancel_load)
    cancel_button.setVisible(False)
    bar.addWidget(stage, 1)  # what is left; "…" and the whole text in its tooltip past that
    bar.addWidget(progress)
    bar.addWidget(cancel_button)
    bar.addWidget(traffic_label)
    bar.addWidget(error_label, 1)
    return progress, stage, error_label, traffic_label, cancel_button
