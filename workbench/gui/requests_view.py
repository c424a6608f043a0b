"""The live requests table and, for the selected request, its text and life-cycle timeline."""

from __future__ import annotations

import re

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QPushButton, QSplitter, QTableView, QVBoxLayout, QWidget

from workbench.live.request_rows import RequestRow

COLUMNS = [
    ("id", "request_id"),
    ("tag", "tag"),
    ("state", "state"),
    ("prompt tok", "prompt_tokens"),
    ("output tok", "output_tokens"),
    ("queue ms", "queue_ms"),
    ("TTFT ms", "ttft_ms"),
    ("TPOT ms/tok", "tpot_ms"),
    ("e2e ms", "e2e_ms"),
    ("preempt.", "preemptions"),
]


def _cell(row: RequestRow, attribute: str):
    if attribute == "prompt_tokens":
        return len(row.prompt_token_ids)
    if attribute == "output_tokens":
        return len(row.output_token_ids)
    return getattr(row, attribute)


def _sort_key(row: RequestRow, attribute: str):
    """Numbers as numbers with missing values last; ids naturally (chat-9 before chat-10)."""
    value = _cell(row, attribute)
    if isinstance(value, str):
        return re.sub(r"\d+", lambda digits: digits.group().zfill(12), value)
    return float("inf") if value is None else value


class RequestsModel(QAbstractTableModel):
    """The rows, sorted here by one key per row. (A QSortFilterProxyModel calls data() through
    Python for each of its n log n comparisons, on every refresh: with 2,000 requests in flight it
    held the window for seconds.)"""

    def __init__(self):
        super().__init__()
        self.rows: list[RequestRow] = []
        self.sort_column, self.sort_order = 0, Qt.SortOrder.AscendingOrder

    def set_rows(self, rows: list[RequestRow]) -> None:
        self.beginResetModel()
        self.rows = self._sorted(rows)
        self.endResetModel()

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Reorder the rows; the selection (a persistent index) moves with its request, as Qt's
        layout-change contract asks: left alone it stayed on the row number, so the detail pane
        showed one request while "Abort selected request" aborted another."""
        self.layoutAboutToBeChanged.emit()
        self.sort_column, self.sort_order = column, order
        before = self.rows
        self.rows = self._sorted(before)
        position = {row.request_id: number for number, row in enumerate(self.rows)}
        moved = self.persistentIndexList()
        self.changePersistentIndexList(
            moved, [self.index(position[before[index.row()].request_id], index.column()) for index in moved]
        )
        self.layoutChanged.emit()

    def _sorted(self, rows: list[RequestRow]) -> list[RequestRow]:
        attribute = COLUMNS[self.sort_column][1]
        return sorted(
            rows, key=lambda row: _sort_key(row, attribute), reverse=self.sort_order == Qt.SortOrder.DescendingOrder
        )

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section][0]
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        value = _cell(self.rows[index.row()], COLUMNS[index.column()][1])
        if value is None:
            return "-"
        return f"{value:,.1f}" if isinstance(value, float) else str(value)


class RequestsView(QWidget):
    abort_requested = Signal(str)
    selection_changed = Signal(object)  # the selected request id, or None

    def __init__(self, decode):
        """decode: token ids -> text (the engine's tokenizer, or None for token-only models)."""
        super().__init__()
        self.decode = decode
        self.model = RequestsModel()
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self.selection_changed.emit(self.selected_id()))
        self.detail = QPlainTextEdit()
        self.detail.setReadOnly(True)
        self.abort_button = QPushButton("Abort selected request")
        self.abort_button.clicked.connect(self._abort_selected)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.detail)
        right_layout.addWidget(self.abort_button)
        splitter = QSplitter()
        splitter.addWidget(self.table)
        splitter.addWidget(right)
        splitter.setSizes([700, 400])
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)

    def selected_id(self) -> str | None:
        indexes = self.table.selectionModel().selectedRows()
        if not indexes:
            return None
        return self.model.rows[indexes[0].row()].request_id

    def set_rows(self, rows: list[RequestRow]) -> None:
        selected = self.selected_id()
        self.model.set_rows(rows)
        if selected is not None:
            self.select(selected)

    def select(self, request_id: str) -> bool:
        """Select the request's row and show it; False when the table has no such request."""
        for index, row in enumerate(self.model.rows):
            if row.request_id == request_id:
                self.table.selectRow(index)
                self.table.scrollTo(self.model.index(index, 0))
                return True
        return False

    def show_detail(self, row: RequestRow | None, history: str = "") -> None:
        """`history`: the request's causal history from the step traces (waits and their reasons,
        admission, chunks, blocks, preemptions), where the backend keeps them."""
        if row is None:
            self.detail.clear()
            return
        prompt = self.decode(row.prompt_token_ids) if self.decode else str(row.prompt_token_ids[:64])
        output = self.decode(row.output_token_ids) if self.decode else str(row.output_token_ids)
        timeline = "\n".join(f"  {seconds:9.3f} s  {event}" for seconds, event in row.timeline)
        self.detail.setPlainText(
            f"{row.request_id} ({row.tag}) — {row.state}\n\ntimeline (seconds since the run started):\n{timeline}\n\n"
            + (f"step by step (the step traces):\n{history}\n\n" if history else "")
            + f"prompt ({len(row.prompt_token_ids)} tokens):\n{prompt}\n\noutput ({len(row.output_token_ids)} "
            f"tokens):\n{output}"
        )

    def _abort_selected(self) -> None:
        selected = self.selected_id()
        if selected is not None:
            self.abort_requested.emit(selected)
