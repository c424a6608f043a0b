"""The questions the window asks before it drops something: requests in flight at a reload or a
new run, requests waiting at a Stop. Each returns the user's answer; the window's methods that
call them are what tests replace."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget


def confirm_reload(parent: QWidget) -> bool:
    """Ask before a reload drops the requests in flight."""
    answer = QMessageBox.question(parent, "Reload the engine?", "Requests are in flight; reloading drops them. Reload?")
    return answer == QMessageBox.StandardButton.Yes


def confirm_new_run(parent: QWidget, in_flight: int, reload: bool = False) -> bool:
    """Ask before a new run aborts the last run's requests in flight; `reload`: the new run also
    loads other engine settings."""
    answer = QMessageBox.question(
        parent,
        "Start a new run?",
        f"{in_flight} requests of the current run are in flight. A new run aborts them"
        f"{' and loads its own engine settings' if reload else ''}; they end, aborted, in the current run's "
        "folder, which is kept. Start?",
    )
    return answer == QMessageBox.StandardButton.Yes


def confirm_drop_waiting(parent: QWidget, waiting: int) -> bool | None:
    """Stop with requests waiting: True drops them, False lets them run, None cancels the Stop."""
    box = QMessageBox(
        QMessageBox.Icon.Question,
        "Stop the traffic",
        f"{waiting:,} requests sent are waiting for a step. Drop them too, or let them run to the end?",
        parent=parent,
    )
    drop = box.addButton("Drop the waiting", QMessageBox.ButtonRole.DestructiveRole)
    keep = box.addButton("Let them run", QMessageBox.ButtonRole.AcceptRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    return {drop: True, keep: False}.get(box.clickedButton())
