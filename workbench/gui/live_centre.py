"""The Live view's centre: the plots over the tabs (requests, block map, step, why, memory, runs),
in a splitter that keeps the plots' room for their data whatever the tabs take.

At 1280x800 the plots were once about 40 pixels tall, and a click that opened the Step tab made
the tabs 45% of the height. A window's height goes to the plots first, up to
PLOTS_PREFERRED_HEIGHT (every data area at least 120 pixels); the tabs take the rest and can be
dragged shut (at 800x600). A tab opened (clicked, or shown by the window) gets at least
TABS_OPEN_HEIGHT, the plots keeping PLOTS_MIN_HEIGHT.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QSplitter, QTabWidget, QWidget

PLOTS_MIN_HEIGHT = 380  # pixels: three rows of plots with their titles, axes and legends
PLOTS_PREFERRED_HEIGHT = 670  # every plot's data area at least 120 pixels (a test checks at 1280x800)
TABS_OPEN_HEIGHT = 220  # pixels: a tab opened gets at least this


class LiveCentre(QSplitter):
    def __init__(self, plots: QWidget, tabs: list[tuple[QWidget, str]]):
        super().__init__(Qt.Orientation.Vertical)
        self.tabs = QTabWidget()
        for widget, title in tabs:
            self.tabs.addTab(widget, title)
        self._shared = False  # the plots and the tabs get their shares at the first show
        self.addWidget(plots)
        self.addWidget(self.tabs)
        plots.setMinimumHeight(PLOTS_MIN_HEIGHT)
        self.setCollapsible(0, False)
        self.setCollapsible(1, True)
        self.setStretchFactor(0, 1)
        self.setStretchFactor(1, 0)
        self.tabs.setMinimumHeight(self.tabs.tabBar().sizeHint().height())  # at the least, the tab bar
        self.tabs.currentChanged.connect(self._open_tabs)
        self.tabs.tabBarClicked.connect(self._open_tabs)

    def showEvent(self, event) -> None:
        """At the first show, when the centre's height is known: the plots' share first."""
        super().showEvent(event)
        if not self._shared:
            self._shared = True
            QTimer.singleShot(0, self, self._share)  # once the layout has given the centre its height

    def _share(self) -> None:
        total = sum(self.sizes())
        plots = min(PLOTS_PREFERRED_HEIGHT, total - self.tabs.minimumHeight())
        self.setSizes([plots, total - plots])

    def _open_tabs(self, _index: int = -1) -> None:
        sizes = self.sizes()
        total = sum(sizes)
        tabs = min(TABS_OPEN_HEIGHT, total - PLOTS_MIN_HEIGHT)
        if self._shared and sizes[1] < tabs:
            self.setSizes([total - tabs, tabs])
