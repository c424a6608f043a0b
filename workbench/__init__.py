"""The Workbench desktop app (all Qt code lives in this package)."""
