"""The requests table: natural sorting of ids, and a selection that survives sorting."""

from __future__ import annotations

from PySide6.QtCore import Qt

from workbench.gui.requests_view import RequestsView
from workbench.live.request_rows import RequestRow


def view_with_rows(qtbot, ids):
    view = RequestsView(decode=None)
    qtbot.addWidget(view)
    view.set_rows([RequestRow(request_id, "chat", "decoding", [1, 2, 3]) for request_id in ids])
    return view


def visible_ids(view):
    shown = view.table.model()
    return [shown.index(row, 0).data() for row in range(shown.rowCount())]


def test_ids_sort_naturally(qtbot):
    view = view_with_rows(qtbot, ["chat-9", "chat-36", "chat-4", "chat-10"])
    view.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    assert visible_ids(view) == ["chat-4", "chat-9", "chat-10", "chat-36"]


def test_abort_takes_the_selected_row_through_the_sort(qtbot):
    view = view_with_rows(qtbot, ["chat-0", "chat-1", "chat-2"])
    view.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
    assert visible_ids(view) == ["chat-2", "chat-1", "chat-0"]
    aborted = []
    view.abort_requested.connect(aborted.append)
    for row, expected in ((0, "chat-2"), (2, "chat-0"), (1, "chat-1")):
        view.table.selectRow(row)
        view.abort_button.click()
        assert aborted[-1] == expected
    view.set_rows(
        [RequestRow(request_id, "chat", "finished", [1]) for request_id in ("chat-0", "chat-1", "chat-2", "chat-3")]
    )
    assert view.selected_id() == "chat-1"  # the selection follows its request across a refresh


def test_sorting_keeps_the_selected_request_selected(qtbot):
    view = view_with_rows(qtbot, ["chat-2", "chat-0", "chat-1"])
    assert view.select("chat-2") and view.selected_id() == "chat-2"
    changes = []
    view.selection_changed.connect(changes.append)
    view.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    assert visible_ids(view) == ["chat-0", "chat-1", "chat-2"]
    assert view.selected_id() == "chat-2" and changes in ([], ["chat-2"])  # the same request: no other one shown
    aborted = []
    view.abort_requested.connect(aborted.append)
    view.abort_button.click()
    assert aborted == ["chat-2"]


def test_a_refresh_keeps_the_chosen_sort_numbers_as_numbers_and_missing_values_last(qtbot):
    view = view_with_rows(qtbot, [])
    view.table.sortByColumn(6, Qt.SortOrder.AscendingOrder)  # TTFT ms
    view.set_rows(
        [
            RequestRow(request_id, "chat", "finished", [1], ttft_ms=ttft)
            for request_id, ttft in (("a", 100.0), ("b", None), ("c", 9.5), ("d", 20.0))
        ]
    )
    assert visible_ids(view) == ["c", "d", "a", "b"]
