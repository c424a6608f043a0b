"""Run folders: where the window keeps each run, and the lock a writer holds on a folder.

A run is the user's data. The window gives every run a folder of its own under the runs folder
(`runs_home()`), named for when it started and what it ran, and never removes one. A process that
writes a run folder (`workbench bench --out`, the window) holds its lock for as long as it writes;
a second writer is refused with the holder's pid rather than deleting the first's log. The lock
is an advisory `flock` on a file in the folder, so it dies with its holder: a killed bench leaves
no stale lock behind. A folder whose files are symbolic links is refused too: a run writes plain
files, never through a link planted to point elsewhere.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import time
from pathlib import Path

from engine.errors import ConfigError

RUNS_HOME_ENVIRONMENT = "WORKBENCH_RUNS"
LOCK_NAME = ".writing.lock"
# The folders this process holds locks on: a folder inside one of them is this process's already
# (bench locks its --out, then each variant's run folder inside it).
_HELD: set[Path] = set()


def runs_home() -> Path:
    """Where the window keeps its runs: $WORKBENCH_RUNS, else $XDG_DATA_HOME/workbench/runs
    (~/.local/share/workbench/runs)."""
    if chosen := os.environ.get(RUNS_HOME_ENVIRONMENT):
        return Path(chosen)
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "workbench" / "runs"


def new_run_folder(parent: Path, name: str) -> Path:
    """A new, empty folder for one run: PARENT/YYYYMMDD-HHMMSS-NAME (with -2, -3... where that
    exists already). Never an existing folder: nothing of an earlier run is touched."""
    parent.mkdir(parents=True, exist_ok=True)
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{re.sub(r'[^A-Za-z0-9._-]+', '-', name).strip('-') or 'run'}"
    for attempt in range(1, 1000):
        folder = parent / (stem if attempt == 1 else f"{stem}-{attempt}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise ConfigError(f"{parent}: 999 run folders named {stem} already; choose another runs folder")


def refuse_links(folder: Path, depth: int = 2) -> None:
    """ConfigError naming the first symbolic link in `folder` (or the folder itself), down to
    `depth` levels (bench's --out holds variant and repeat folders)."""
    if folder.is_symlink():
        raise ConfigError(f"{folder}: a symbolic link; a run is written only into a plain folder")
    if depth == 0 or not folder.is_dir():
        return
    for entry in sorted(folder.iterdir()):
        if entry.is_symlink():
            raise ConfigError(f"{entry}: a symbolic link in a run folder; a run writes only plain files (remove it)")
        if entry.is_dir():
            refuse_links(entry, depth - 1)


class RunFolderLock:
    """Held while this process writes `folder`; ConfigError when another process holds it.
    `release()` (or the process's end) frees it. Inside a folder this process holds already, it
    holds nothing more."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        refuse_links(folder)
        self.folder = folder
        self._path = folder / LOCK_NAME
        self._descriptor: int | None = None
        self._resolved = folder.resolve()
        if any(held == self._resolved or held in self._resolved.parents for held in _HELD):
            return
        while True:
            descriptor = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                holder = _read_holder(descriptor)
                os.close(descriptor)
                if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise ConfigError(
                        f"{folder}: another process{holder} is writing a run into this folder; "
                        "choose another folder, or wait for it to end"
                    ) from None
                raise
            # The holder before us may have removed the file between our open and our lock: a lock
            # on a removed file guards nothing, so take the file that is there now instead.
            if _same_file(descriptor, self._path):
                break
            os.close(descriptor)
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        self._descriptor = descriptor
        _HELD.add(self._resolved)

    def release(self) -> None:
        if self._descriptor is not None:
            _HELD.discard(self._resolved)
            self._path.unlink(missing_ok=True)  # before unlocking: a waiter then sees the file gone
            os.close(self._descriptor)
            self._descriptor = None

    def __enter__(self) -> RunFolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _same_file(descriptor: int, path: Path) -> bool:
    try:
        on_disk = path.stat(follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _read_holder(descriptor: int) -> str:
    """ " (pid N)" from the lock file, or "" where it says nothing readable."""
    text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    return f" (pid {text})" if text.isdigit() else ""
