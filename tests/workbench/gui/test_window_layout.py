"""The window with a real worker thread and a tiny model (pytest-qt, offscreen): the window's layout at
1280 by 800 and 800 by 600: every plot readable, every control whole, the frame on the screen. Waits
are on conditions, never on fixed sleeps."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt


def test_the_window_opens_no_larger_than_the_screen(window):
    available = window.screen().availableGeometry()
    assert window.width() <= available.width() and window.height() <= available.height()


def test_every_plots_data_area_is_at_least_120_pixels_tall_at_1280_by_800(window, qtbot):
    """They were 30-50 pixels: pyqtgraph's 30-pixel titles, legends of 39-52 and the tabs' 241."""
    from tests.workbench.gui.window_helpers import filled_store

    window.resize(1280, 800)
    qtbot.waitUntil(lambda: window.plots.height() >= 600, timeout=5_000)
    window.plots.update_from(filled_store(requests=5000).snapshot())
    qtbot.wait(50)
    heights = {name: plot.plot.vb.height() for name, plot in window.plots.plots.items()}
    assert min(heights.values()) >= 120, heights
    assert window.centre.isCollapsible(1) and window.tabs.height() > 0  # the tabs give way, and can be dragged shut


def test_no_plot_has_an_axis_below_zero_before_data(window, qtbot):
    from tests.workbench.gui.window_helpers import filled_store

    window.plots.update_from(filled_store(steps=0, requests=0).snapshot())
    qtbot.wait(50)
    for name, plot in window.plots.plots.items():
        assert plot.plot.vb.viewRange()[1][0] >= 0, name


def test_the_window_fits_800_by_600_with_its_status_bar_and_every_plot_reachable(window, qtbot):
    """Its minimum was 859x742: the status bar, where every error appears, and the plots' right
    column were off-screen."""
    from tests.workbench.gui.window_helpers import filled_store

    assert window.minimumSizeHint().width() <= 800 and window.minimumSizeHint().height() <= 600
    window.resize(800, 600)
    qtbot.waitUntil(lambda: window.width() == 800 and window.height() == 600, timeout=5_000)
    window.plots.update_from(filled_store(requests=5000).snapshot())
    qtbot.wait(50)
    status = window.statusBar().geometry()
    assert status.bottom() < window.height() and status.height() > 0
    # Two columns of plots need more than the centre has: they scroll sideways instead of being cut.
    needed = window.plots.layout_widget.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
    assert window.plots.layout_widget.width() >= needed > window.plots.scroll.viewport().width()
    assert window.plots.scroll.horizontalScrollBar().maximum() > 0
    # Issue 58 #5: the goodput line was cut before its n ("38 of n=4…"): where it does not fit
    # whole, it shows its short form, whole.
    goodput = window.plots.goodput
    assert "of n=5000)" in goodput.text() and goodput.shown_text() in (goodput.text(), "goodput 0.4%, n=5000")
    assert goodput.width() >= goodput.minimumSizeHint().width()


def test_every_control_is_whole_and_inside_its_column_at_1280_by_800(window, qtbot):
    """Issue 19 #15: the controls column was narrower than its contents (the model name cut,
    "Apply and l…", Stop behind a horizontal scrollbar). Scrolling down is fine; sideways is not."""
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QAbstractButton, QAbstractSpinBox, QComboBox, QLineEdit, QScrollArea

    window.resize(1280, 800)
    qtbot.wait(50)
    scroll = window.main_splitter.widget(0)
    assert isinstance(scroll, QScrollArea)
    viewport = scroll.viewport()
    controls = [
        widget
        for kind in (QAbstractButton, QComboBox, QLineEdit, QAbstractSpinBox)
        for widget in scroll.widget().findChildren(kind)
        if widget.isVisibleTo(scroll.widget())
    ]
    assert len(controls) > 20
    for widget in controls:
        left = widget.mapTo(viewport, QPoint(0, 0)).x()
        name = widget.text() if hasattr(widget, "text") else widget.objectName() or type(widget).__name__
        assert 0 <= left and left + widget.width() <= viewport.width(), f"{name!r} reaches past the column"
        if isinstance(widget, QAbstractButton):
            assert widget.width() >= widget.sizeHint().width(), f"button {name!r} is cut"
    assert not scroll.horizontalScrollBar().isVisible()
    # The plots, with every title and legend filled in, fit the centre side by side.
    from PySide6.QtCore import Qt

    from tests.workbench.gui.window_helpers import filled_store

    for whole in (False, True):  # a whole run's latency title has a second line, of intervals
        window.plots.update_from(filled_store(requests=5000).snapshot(), whole=whole)
        qtbot.wait(50)
        needed = window.plots.layout_widget.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
        assert needed <= window.plots.layout_widget.viewport().width(), (whole, window.plots.latency.plot.title_text)


def test_warm_up_titles_leave_both_columns_of_plots_in_view_at_1280_and_1480(window, qtbot):
    """Issue 58 #5: "no step yet, warming up, ..." in one line pushed two plots behind a sideways
    scrollbar at 1280 and 1480 px."""
    from tests.workbench.gui.window_helpers import filled_store

    waiting = "warming up, 12 min 34 s so far<br>the run starts when it is warm"  # as refresh_plots says it
    for width in (1280, 1480):
        window.resize(width, 800)
        qtbot.waitUntil(lambda: window.width() == width, timeout=5_000)  # noqa: B023
        window.plots.update_from(filled_store(steps=0, requests=0).snapshot(), waiting=waiting)
        assert "no step yet" in window.plots.plots["kv_occupancy"].plot.title_text
        # Once the plots have laid out their new titles (a busy machine takes a few frames).
        qtbot.waitUntil(lambda: window.plots.scroll.horizontalScrollBar().maximum() == 0, timeout=5_000)


def test_the_window_opens_with_its_frame_and_status_bar_on_the_screen(window, qtbot):
    """Issue 58 #5: sized to the screen's whole available height, the window manager's title bar
    pushed the status bar below an 800-pixel screen. (Qt's offscreen platform frames windows too:
    a 22-pixel title bar.)"""
    available = window.screen().availableGeometry()
    window.show()
    qtbot.waitExposed(window)
    frame = window.frameGeometry()
    assert frame.height() > window.height()  # there is a frame to allow for
    assert window.height() + (frame.height() - window.height()) <= available.height()
    status = window.statusBar()
    assert status.mapTo(window, status.rect().bottomLeft()).y() < window.height()


@pytest.mark.parametrize("tab, whole", [("KV block map", False), ("Runs", False), ("Runs", True)])
def test_every_plots_data_area_stays_readable_at_800_by_600_with_a_tab_open(window, qtbot, tab, whole):
    """Issue 58 #5: at 800x600 with a tab open the data areas were 20-45 pixels. The plots keep
    PLOT_MIN_DATA_HEIGHT each and scroll up and down where the centre is shorter than that.
    Issue 77 #6: a whole run's latency title takes a second line, and the plot kept 76 pixels (the
    rows' extra room was spread alike, not by what each row's plots need)."""
    from tests.workbench.gui.window_helpers import filled_store
    from workbench.gui.plots_view import PLOT_MIN_DATA_HEIGHT

    window.resize(800, 600)
    qtbot.waitUntil(lambda: window.width() == 800 and window.height() == 600, timeout=5_000)
    window.plots.update_from(filled_store(requests=5000).snapshot(), whole=whole)
    window.tabs.setCurrentIndex([window.tabs.tabText(i) for i in range(window.tabs.count())].index(tab))
    window.tabs.tabBarClicked.emit(window.tabs.currentIndex())
    qtbot.waitUntil(lambda: window.tabs.height() >= 120, timeout=5_000)
    qtbot.wait(50)
    heights = {name: plot.plot.vb.height() for name, plot in window.plots.plots.items()}
    assert min(heights.values()) >= PLOT_MIN_DATA_HEIGHT - 1, heights  # less a fraction of a pixel
    scroll = window.plots.scroll
    assert scroll.verticalScrollBar().maximum() > 0  # what does not fit is reached by scrolling
    status = window.statusBar().geometry()
    assert status.bottom() < window.height() and status.height() > 0
