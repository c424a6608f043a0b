"""The package as a user installs it: a wheel built from the checkout and installed outside it
finds its presets and catalogue (they were read relative to the source tree, so a non-editable
install listed no presets and exited 0), and a preset runs from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel's files in a folder of their own; its dependencies are the test environment's."""
    work = tmp_path_factory.mktemp("wheel")
    # Built from a copy: an in-tree build leaves build/, whose stale files a later wheel would carry.
    source = work / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", "build", "mutants", "runs", "*.egg-info", "__pycache__", ".git", ".hypothesis", ".pytest_cache"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work),
            str(source),
        ],
        check=True,
        cwd=work,
    )
    (wheel,) = work.glob("workbench-*.whl")
    target = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    return target


def run_installed(site: Path, cwd: Path, *arguments: str) -> subprocess.CompletedProcess:
    """`workbench ARGS` from the installed files, in a folder outside the checkout."""
    environment = {**os.environ, "PYTHONPATH": str(site), "QT_QPA_PLATFORM": "offscreen"}
    code = (
        "import sys, workbench, workbench.cli; assert workbench.__file__.startswith(sys.argv[1]), workbench.__file__; "
        "sys.exit(workbench.cli.main(sys.argv[2:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(site), *arguments],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_an_installed_wheel_lists_its_presets_and_runs_one(installed, tmp_path):
    listed = run_installed(installed, tmp_path, "presets")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert {"chat-burst", "int4-vs-none", "prefix-sharing"} <= set(names)
    # A preset on a simulated GPU (its shapes from the catalogue), run to its report.
    ran = run_installed(
        installed,
        tmp_path,
        "bench",
        "--preset",
        "chat-steady",
        "--set",
        "engine.model=simulated:llama-2-7b@h100-80gb",
        "--set",
        "traffic.num_requests=5",
        "--out",
        str(tmp_path / "out"),
        "--no-plots",
    )
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "out" / "report.json").is_file()
    # The CPU operators are built from the sources the wheel carries.
    assert (installed / "kernels" / "cpu_paged_attention.cpp").is_file()
    assert (installed / "kernels" / "cpu_int4_product.cpp").is_file()


def test_with_no_presets_found_the_list_says_so_and_fails(monkeypatch, tmp_path, capsys):
    from workbench.cli import main
    from workbench.traffic import presets

    monkeypatch.setattr(presets, "PRESET_DIR", tmp_path)
    assert main(["presets"]) == 1
    assert (
        capsys.readouterr().err
        == f"workbench: no presets found in {tmp_path} (the package data of an incomplete install)\n"
    )
