"""Files the workbench writes and later reads back for the user (measured hardware profiles, the
quality ledger): each change is a read-modify-write under an exclusive lock, and the new text
replaces the old in one rename, so concurrent writers each keep their entry and a crash mid-write
leaves the old file whole. A file that cannot be read is refused by its reader, naming it, and
never rewritten (it holds the user's measurements)."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of `path` (an flock on PATH.lock beside it, which the kernel releases
    if its holder dies) for a read-modify-write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def replace_text(path: Path, text: str) -> None:
    """Write `text` to a new file beside `path`, flushed to disk, then rename it over `path`."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
