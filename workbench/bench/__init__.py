"""Whole runs with their report and files: a scenario run headless into a run folder
(`workbench bench`, sweep, replay), and the window's run saved in the same format."""
