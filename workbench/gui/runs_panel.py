"""The Runs tab: buttons for what the window does with runs (save the current one, open a past
one, compare two, draw one as a baseline, export the plots) and the text of what the last of them
did. The window does the work; the run files themselves are workbench/bench/run_files.py's."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QGridLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget


class RunsPanel(QWidget):
    def __init__(self, actions: list[tuple[str, Callable[[], object]]]):
        super().__init__()
        buttons = QGridLayout()  # two columns: the window must still fit an 800-pixel-wide screen
        for index, (label, slot) in enumerate(actions):
            button = QPushButton(label)
            button.clicked.connect(lambda _checked=False, slot=slot: slot())
            buttons.addWidget(button, index // 2, index % 2)
        buttons.setColumnStretch(2, 1)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        layout = QVBoxLayout(self)
        layout.addLayout(buttons)
        layout.addWidget(self.text)

    def say(self, text: str) -> None:
        self.text.setPlainText(text)
