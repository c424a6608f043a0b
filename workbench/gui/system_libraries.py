"""Before the window opens: can Qt's X11 platform plugin load? Without one of its system
libraries (libxcb-cursor0 is the usual one) Qt aborts the process with a plugin error; this says
instead which Debian/Ubuntu packages to install."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path


def xcb_plugin() -> Path | None:
    spec = importlib.util.find_spec("PySide6")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"


def uses_xcb() -> bool:
    """Qt will pick its X11 plugin: asked for, or an X display without Wayland."""
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    return platform == "xcb" or (
        not platform and bool(os.environ.get("DISPLAY")) and not os.environ.get("WAYLAND_DISPLAY")
    )


def missing_packages(library: Path) -> list[str]:
    """The packages of the shared libraries `library` needs that the dynamic loader cannot find
    (`ldd` says "not found"), by Debian/Ubuntu name; [] where that cannot be checked."""
    if shutil.which("ldd") is None or not library.exists():
        return []
    listing = subprocess.run(["ldd", str(library)], capture_output=True, text=True, check=False).stdout
    return sorted({debian_package(line.split()[0]) for line in listing.splitlines() if "=> not found" in line})


def debian_package(soname: str) -> str:
    """Debian's package name for a library: libxcb-cursor.so.0 -> libxcb-cursor0,
    libxkbcommon-x11.so.0 -> libxkbcommon-x11-0 (a dash when the name ends in a digit)."""
    name, _, version = soname.partition(".so.")
    name = name.lower().replace("_", "-")
    major = version.split(".")[0]
    return f"{name}{'-' if major and name[-1].isdigit() else ''}{major}"


def xcb_problem() -> str | None:
    """What to install for the window to start on X11, or None."""
    plugin = xcb_plugin()
    if not uses_xcb() or plugin is None:
        return None
    missing = missing_packages(plugin)
    if not missing:
        return None
    return (
        f"the window cannot start: Qt's X11 platform plugin needs system libraries that are missing; "
        f"install them with: sudo apt-get install {' '.join(missing)}"
    )
