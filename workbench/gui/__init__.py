"""Everything Qt: the window, its worker thread, panels, plots and views."""
