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
        f"{requests_are(in_flight)} in flight in the current run. A new run aborts "
        f"{'it' if in_flight == 1 else 'them'}{' and loads its own engine settings' if reload else ''}; "
        f"{'it ends' if in_flight == 1 else 'they end'}, aborted, in the current run's folder, which is kept. Start?",
    )
    return answer == QMessageBox.StandardButton.Yes


def confirm_drop_waiting(parent: QWidget, waiting: int) -> bool | None:
    """Stop with requests waiting: True drops them, False lets them run, None cancels the Stop."""
    box = QMessageBox(
        QMessageBox.Icon.Question,
        "Stop the traffic",
        drop_waiting_question(waiting),
        parent=parent,
    )
    drop = box.addButton("Drop the waiting", QMessageBox.ButtonRole.DestructiveRole)
    keep = box.addButton("Let them run", QMessageBox.ButtonRole.AcceptRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    return {drop: True, keep: False}.get(box.clickedButton())


def requests_are(count: int) -> str:
    """ "1 request is", "2 requests are": the count said as a sentence needs it."""
    return f"{count:,} request is" if count == 1 else f"{count:,} requests are"


def drop_waiting_question(waiting: int) -> str:
    them = "it" if waiting == 1 else "them"
    return f"{requests_are(waiting)} waiting for a step. Drop {them} too, or let {them} run to the end?"
