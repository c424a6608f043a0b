"""Where the workbench keeps what it makes once per machine and reuses: joined model files,
measured hardware profiles, the quality ledger, compiled decode graphs and how long they took.

`$WORKBENCH_CACHE`, else `$XDG_CACHE_HOME/workbench`, else `~/.cache/workbench` — not a temporary
folder, which a reboot empties: a compiled graph found there saves minutes (docs/compiled-decode.md).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_directory() -> Path:
    if explicit := os.environ.get("WORKBENCH_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "workbench"
