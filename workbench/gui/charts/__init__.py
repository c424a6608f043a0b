"""Plots drawn with pyqtgraph, with no window: the five live plots, the sweep and replay charts and
their PNG export. The window shows them; headless commands write them (Qt offscreen), and this is
the one part of the GUI package they import (tests/test_architecture.py)."""
