"""A missing system library of Qt's X11 plugin is named, by package, before Qt can abort."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from workbench.gui.system_libraries import debian_package, missing_packages, xcb_plugin


@pytest.mark.parametrize(
    "soname, package",
    [
        ("libxcb-cursor.so.0", "libxcb-cursor0"),
        ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
        ("libX11-xcb.so.1", "libx11-xcb1"),
        ("libEGL.so.1", "libegl1"),
        ("libgssapi_krb5.so.2", "libgssapi-krb5-2"),
    ],
)
def test_library_names_become_debian_package_names(soname, package):
    assert debian_package(soname) == package


@pytest.fixture
def library_with_a_missing_dependency(tmp_path):
    """A real shared library linked against libxcb-fakecursor.so.0, which is then removed."""
    if shutil.which("gcc") is None or shutil.which("ldd") is None:
        pytest.skip("needs gcc and ldd")
    (tmp_path / "dependency.c").write_text("int fake_cursor(void) { return 0; }\n")
    (tmp_path / "plugin.c").write_text("int fake_cursor(void);\nint plugin(void) { return fake_cursor(); }\n")
    dependency = tmp_path / "libxcb-fakecursor.so.0"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libxcb-fakecursor.so.0",
            "-o",
            str(dependency),
            str(tmp_path / "dependency.c"),
        ],
        check=True,
    )
    (tmp_path / "libxcb-fakecursor.so").symlink_to(dependency.name)
    plugin = tmp_path / "libqfake.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(plugin), str(tmp_path / "plugin.c"), f"-L{tmp_path}", "-lxcb-fakecursor"],
        check=True,
    )
    dependency.unlink()
    return plugin


def test_a_missing_dependency_is_named_by_its_package(library_with_a_missing_dependency):
    assert missing_packages(library_with_a_missing_dependency) == ["libxcb-fakecursor0"]


def test_this_machine_has_what_the_real_plugin_needs():
    """In CI (.ci/run sets WORKBENCH_CI) a missing library fails; elsewhere the test skips, naming
    the command that installs them (a fresh machine whose user may not run apt-get)."""
    missing = missing_packages(xcb_plugin())
    if missing and not os.environ.get("WORKBENCH_CI"):
        pytest.skip(f"Qt's X11 plugin lacks {', '.join(missing)}: run scripts/install_x_libraries.sh")
    assert missing == []


def test_gui_says_what_to_install_and_exits_2_instead_of_aborting(library_with_a_missing_dependency, tmp_path):
    environment = {
        **os.environ,
        "QT_QPA_PLATFORM": "xcb",
        "DISPLAY": ":99",
        "WORKBENCH_SETTINGS": str(tmp_path / "settings.ini"),
    }
    script = (
        "import sys; from pathlib import Path; import workbench.gui.system_libraries as libraries; "
        f"libraries.xcb_plugin = lambda: Path({str(library_with_a_missing_dependency)!r}); "
        "from workbench.cli import main; sys.exit(main(['gui']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "workbench: the window cannot start: Qt's X11 platform plugin needs system libraries "
        "that are missing; install them with: sudo apt-get install libxcb-fakecursor0"
    )
