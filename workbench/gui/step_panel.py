"""The Step panel: one engine step's trace as four tables (before, computation, persisted, to the
caller), with buttons and ←/→ to move one step and "Live" to follow the run again. Rows of the
selected request are highlighted."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.requests.step_trace import ALLOCATE, RELEASE, REUSE, StepTrace
from workbench.step_traces.text import block_ranges, row_tokens

PARTS = {  # table: (title, what it holds, columns)
    "before": (
        "before",
        "what the scheduler saw: queues, KV blocks, the token budget, blocks released since the last step",
        [
            "waiting",
            "waiting_long",
            "running",
            "token budget",
            "KV used",
            "KV free",
            "free, holding a prefix",
            "released before the step (aborts)",
        ],
    ),
    "computation": (
        "computation",
        "the batch's rows, and why each waiting queue's head was not admitted",
        ["request", "work", "queue", "why"],
    ),
    "persisted": (
        "persisted",
        "KV blocks allocated, reused and released, and preemptions with their reason",
        ["request", "change", "blocks", "free list", "why"],
    ),
    "caller": (
        "to the caller",
        "tokens emitted, and requests finished with their reason",
        ["request", "tokens", "finished"],
    ),
}
_HIGHLIGHT = QBrush(QColor("#3d5a80"))


def step_keys(widget: QWidget, move: Callable[[int], None]) -> None:
    """← and → call move(-1) and move(+1) while the focus is in `widget` (a table's own arrow keys
    included). The context is set on the shortcut, not passed with a callable: PySide6 then
    ignores it and makes a window-wide shortcut, and two of those on one key cancel each other."""
    for key, delta in ((Qt.Key.Key_Left, -1), (Qt.Key.Key_Right, +1)):
        shortcut = QShortcut(QKeySequence(key), widget, context=Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(lambda delta=delta: move(delta))


class StepPanel(QWidget):
    step_requested = Signal(int)  # move to this step
    live_requested = Signal()  # leave the selected step, follow the run

    def __init__(self):
        super().__init__()
        self.trace: StepTrace | None = None
        self.highlighted: str | None = None  # the selected request
        self._shown: tuple[float, tuple[int, int] | None] = (0.0, None)  # origin and kept range of the trace shown
        self.previous = QPushButton("◀")
        self.next = QPushButton("▶")
        self.live = QPushButton("Live")
        for button, tip in (
            (self.previous, "The step before (←)"),
            (self.next, "The step after (→)"),
            (self.live, "Leave this step: the block map follows the run again"),
        ):
            button.setToolTip(tip)
        self.previous.clicked.connect(lambda: self.move(-1))
        self.next.clicked.connect(lambda: self.move(+1))
        self.live.clicked.connect(self.live_requested.emit)
        self.title = QLabel("Click a plot to inspect the step at that time.")
        self.title.setWordWrap(True)
        header = QHBoxLayout()
        for button in (self.previous, self.next, self.live):
            header.addWidget(button)
        header.addWidget(self.title, 1)
        self.tables: dict[str, QTableWidget] = {}
        grid = QGridLayout()
        for index, (name, (title, holds, columns)) in enumerate(PARTS.items()):
            table = QTableWidget(0, len(columns))
            table.setHorizontalHeaderLabels(columns)
            table.verticalHeader().setVisible(False)
            table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
            table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
            table.horizontalHeader().setStretchLastSection(True)
            box = QGroupBox(title)
            box.setToolTip(holds)
            QVBoxLayout(box).addWidget(table)
            if index == 0:  # one row of numbers across the top, the three lists side by side below it
                table.setMaximumHeight(
                    table.horizontalHeader().sizeHint().height() + table.verticalHeader().defaultSectionSize() + 6
                )
                grid.addWidget(box, 0, 0, 1, 3)
            else:
                grid.addWidget(box, 1, index - 1)
            self.tables[name] = table
        grid.setRowStretch(1, 1)
        tables = QWidget()
        tables.setLayout(grid)
        scroll = QScrollArea()  # a short tab scrolls instead of squeezing the plots above it
        scroll.setWidget(tables)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(scroll, 1)
        step_keys(self, self.move)

    def move(self, delta: int) -> None:
        if self.trace is not None:
            self.step_requested.emit(self.trace.step + delta)

    def show_not_exposed(self, why: str) -> None:
        """No step traces to show, and why (a server keeps none; tracing is off; an old log)."""
        self.show_trace(None)
        self.title.setText(f"step traces not exposed: {why}")

    def show_trace(self, trace: StepTrace | None, origin: float = 0.0, kept: tuple[int, int] | None = None) -> None:
        """`origin`: the run's start on the engine clock; `kept`: the first and last step one can move to."""
        self.trace, self._shown = trace, (origin, kept)
        if trace is None:
            for table in self.tables.values():
                table.setRowCount(0)
            self.title.setText("Click a plot to inspect the step at that time.")
            return
        kept_text = f" (steps {kept[0]}..{kept[1]} kept)" if kept else ""
        self.title.setText(
            f"step {trace.step}{kept_text}, ends {trace.time_s - origin:.3f} s into the run: "
            f"{1000 * trace.execute_s:.1f} ms executor (forward and sampling), "
            f"{1000 * trace.other_s:.1f} ms other (scheduling, bookkeeping)"
        )
        self.previous.setEnabled(kept is None or trace.step > kept[0])
        self.next.setEnabled(kept is None or trace.step < kept[1])
        kv = trace.kv_before
        released = "; ".join(
            f"{change.request_id} {change.cause}: [{block_ranges(change.block_ids)}]"
            for change in trace.released_before
        )
        before = [
            (
                None,
                [
                    str(value)
                    for value in (
                        trace.waiting,
                        trace.waiting_long,
                        trace.running,
                        trace.token_budget,
                        kv.used_blocks,
                        kv.free_blocks,
                        kv.cached_free_blocks,
                    )
                ]
                + [released or "none"],
            )
        ]
        computation = [
            (
                row.request_id,
                [
                    row.request_id,
                    row_tokens(row),
                    row.admitted_from or "running",
                    "admitted" if row.admitted_from else "",
                ],
            )
            for row in trace.rows
        ]
        if trace.decode_rows_omitted:
            computation.append(
                (None, ["…", f"{trace.decode_rows_omitted} decode rows", "running", "counted in a summary trace"])
            )
        computation += [
            (held.request_id, [held.request_id, "waits (head of its queue)", held.queue, held.reason])
            for held in trace.held
        ]
        persisted = [
            (
                change.request_id,
                [
                    change.request_id,
                    _change_name(change.action),
                    f"{len(change.block_ids)}: [{block_ranges(change.block_ids)}]",
                    _free_list(change),
                    change.cause,
                ],
            )
            for change in trace.block_changes
        ]
        persisted += [
            (preemption.victim, [preemption.victim, "preempted", "", "", preemption.reason])
            for preemption in trace.preemptions
        ]
        if trace.registered:
            persisted.append(
                (
                    None,
                    [
                        "",
                        "findable by prefix",
                        f"{len(trace.registered)}: [{block_ranges(sorted(trace.registered))}]",
                        "",
                        "their content can be reused by a new prompt",
                    ],
                )
            )
        persisted.append(
            (
                None,
                [
                    "",
                    "KV after",
                    f"{trace.kv_after.used_blocks} used",
                    f"{trace.kv_after.free_blocks} free",
                    f"{trace.kv_before.used_blocks} + {trace.blocks_taken()} taken"
                    f" - {trace.blocks_returned()} returned",
                ],
            )
        )
        caller = [
            (
                entry.request_id,
                [
                    entry.request_id,
                    str(entry.token_ids),
                    f"{entry.finish_reason}" + (f": {entry.finish_detail}" if entry.finish_detail else "")
                    if entry.finish_reason
                    else "",
                ],
            )
            for entry in trace.emitted
        ]
        for name, rows in (
            ("before", before),
            ("computation", computation),
            ("persisted", persisted),
            ("caller", caller),
        ):
            self._fill(self.tables[name], rows)

    def highlight(self, request_id: str | None) -> None:
        """Mark the selected request's rows in every table."""
        self.highlighted = request_id
        if self.trace is not None:
            self.show_trace(self.trace, *self._shown)

    def _fill(self, table: QTableWidget, rows: list[tuple[str | None, list[str]]]) -> None:
        table.setRowCount(len(rows))
        for row_index, (request_id, cells) in enumerate(rows):
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if request_id is not None and request_id == self.highlighted:
                    item.setBackground(_HIGHLIGHT)
                table.setItem(row_index, column, item)


def _change_name(action: str) -> str:
    return {ALLOCATE: "allocated", REUSE: "reused (prefix cache)"}.get(action, "released")


def _free_list(change) -> str:
    sign = "+" if change.action == RELEASE else "-"
    return f"{sign}{len(change.free_list)}" if change.free_list else "0"
