"""The controls column's fields in a user's hands: a passing mouse wheel changes nothing, and
typed text a field cannot take is refused by name instead of mangled in silence."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QScrollArea

from workbench.gui.traffic_panel import TrafficPanel


def turn_wheel(widget, notches: int = -3) -> bool:
    """Whether `widget` took the wheel event. One it leaves goes on to the scroll area when the
    window system sends it; a test's event stops at the widget."""
    centre = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(
        centre,
        QPointF(widget.mapToGlobal(QPoint(0, 0))) + centre,
        QPoint(0, 0),
        QPoint(0, 120 * notches),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)
    return event.isAccepted()


def test_the_wheel_scrolls_the_column_past_fields_it_has_not_been_given(qtbot):
    panel = TrafficPanel()
    scroll = QScrollArea()
    scroll.setWidget(panel)
    scroll.resize(400, 300)
    qtbot.addWidget(scroll)
    scroll.show()
    arrival_before, rate_before = panel.arrival.currentText(), panel.rate.value()
    assert not turn_wheel(panel.arrival) and not turn_wheel(panel.rate)  # left to the column
    assert (panel.arrival.currentText(), panel.rate.value()) == (arrival_before, rate_before)
    panel.rate.setFocus()  # clicked into: now the wheel is the user's intent
    qtbot.waitUntil(panel.rate.hasFocus)
    assert turn_wheel(panel.rate, notches=1) and panel.rate.value() != rate_before


def type_into(qtbot, box, text: str, next_widget) -> None:
    box.setFocus()
    qtbot.waitUntil(box.hasFocus)
    box.selectAll()
    if text:
        qtbot.keyClicks(box.lineEdit(), text)
    else:  # emptied
        qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Delete)
    next_widget.setFocus()  # editing ends as focus leaves, as when the user clicks Start
    qtbot.waitUntil(lambda: not box.hasFocus())


def test_typed_text_a_field_cannot_take_is_refused_by_name_and_the_next_start_goes_ahead(qtbot):
    panel = TrafficPanel()
    qtbot.addWidget(panel)
    panel.show()
    refused, started = [], []
    panel.invalid.connect(refused.append)
    panel.start_requested.connect(started.append)
    # "1e12" became 112 and "-5" became 5; an emptied field was refilled and the run started.
    for text, said in (("1e12", "'1e12'"), ("-5", "'-5'"), ("", "empty")):
        type_into(qtbot, panel.prompt_len.mean, text, panel.start_button)
        assert panel.prompt_len.mean.value() == 128
        panel.start_button.click()
        assert (
            refused[-1]
            == (
                f"traffic: prompt tokens: {said} is not a whole number from 1 to 1048576; the field went "
                "back to 128: check it and press again"
            )
            and not started
        )
    panel.start_button.click()  # the value shown, as the message says
    assert len(started) == 1 and started[0].traffic.prompt_len.mean == 128
    type_into(qtbot, panel.rate, "3.5", panel.start_button)  # what it can take, it takes
    panel.start_button.click()
    assert len(started) == 2 and started[1].traffic.rate == 3.5


def test_inject_refuses_a_count_it_cannot_take_and_the_refusal_does_not_block_start(qtbot):
    """Issue 58 #5: "0" chats went back to 20 and 20 chats were injected in silence; that refusal,
    never read, then blocked the next Starts."""
    from PySide6.QtWidgets import QPushButton

    panel = TrafficPanel()
    qtbot.addWidget(panel)
    panel.show()
    refused, injected, started = [], [], []
    panel.invalid.connect(refused.append)
    panel.inject_requested.connect(lambda *request: injected.append(request))
    panel.start_requested.connect(started.append)
    burst = next(button for button in panel.findChildren(QPushButton) if button.text() == "Inject burst of chats")
    type_into(qtbot, panel.burst_count, "0", burst)
    burst.click()
    assert not injected and refused[-1].startswith("inject: chats: '0' is not a whole number from 1 to 10000")
    type_into(qtbot, panel.burst_count, "0", panel.start_button)  # typed again, then Start instead
    panel.start_button.click()
    assert len(started) == 1  # a refusal in the Inject box is not the traffic's
    burst.click()
    assert injected == [] and refused[-1].startswith("inject: chats: '0'")
    burst.click()  # the value shown, as the message says
    assert injected == [(20, 64, 32, "chat", panel.slo())]


def test_the_questions_count_in_words_that_agree():
    """Issue 77 #6: "1 requests sent are waiting"."""
    from workbench.gui.dialogs import drop_waiting_question

    assert drop_waiting_question(1) == "1 request is waiting for a step. Drop it too, or let it run to the end?"
    assert drop_waiting_question(1200).startswith("1,200 requests are waiting for a step. Drop them too")
