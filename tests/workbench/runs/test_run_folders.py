"""Run folders are the user's data (issue 58 #9, #10): a folder another process writes is refused
while it writes (two benches into one --out: the second deleted the first's log and each printed
the other's report), a symbolic link planted in --out is never written through, and a run whose
process was killed gets its report files back from its log with `workbench report`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from engine.errors import ConfigError
from workbench.cli import main
from workbench.runs.run_folder import LOCK_NAME, RunFolderLock, new_run_folder
from workbench.runs.run_log import read_run_log

TAKE_LOCK = "from pathlib import Path; from workbench.runs.run_folder import RunFolderLock; RunFolderLock(Path"
SIMULATED_IN_REAL_TIME = [
    "--preset",
    "chat-steady",
    "--set",
    "engine.model=simulated:llama-3-8b@a100-80gb",
    "--set",
    "engine.simulation_speed=1.0",
    "--set",
    "traffic.num_requests=2000",
    "--no-plots",
]


def _bench_in_another_process(out) -> subprocess.Popen:
    """A bench writing `out`, once its log holds an ended request."""
    command = [sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", "bench"]
    process = subprocess.Popen([*command, *SIMULATED_IN_REAL_TIME, "--out", str(out)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not ((out / "run.jsonl").exists() and b'"type": "request"' in (out / "run.jsonl").read_bytes()):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read().decode()
        time.sleep(0.1)
    return process


def test_a_second_bench_into_a_folder_being_written_is_refused_and_a_killed_one_can_be_reported(tmp_path, capsys):
    out = tmp_path / "out"
    first = _bench_in_another_process(out)
    try:
        lines_before = len((out / "run.jsonl").read_bytes().splitlines())
        assert main(["bench", *SIMULATED_IN_REAL_TIME, "--out", str(out)]) == 2
        error = capsys.readouterr().err
        assert f"{out}: another process (pid {first.pid}) is writing a run into this folder" in error
        assert main(["report", str(out)]) == 2  # nor is a report written under a running bench
        assert len((out / "run.jsonl").read_bytes().splitlines()) >= lines_before  # the first's log, growing
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert not (out / "report.json").exists()  # killed: nothing wrote the report files
    # The lock died with its holder: the folder can be reported now, and says how the run ended.
    assert main(["report", str(out)]) == 0
    assert "incomplete: the run log was not closed (crash or interruption)" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert not report["complete"] and report["metrics"]["requests_not_sent"]["value"] > 0
    assert len(read_run_log(out / "run.jsonl").requests) == report["metrics"]["goodput_perc"]["n"] > 0
    assert not (out / LOCK_NAME).exists()


def test_a_lock_refuses_another_holder_and_is_free_once_released(tmp_path):
    folder = tmp_path / "run"
    held = RunFolderLock(folder)
    other = subprocess.run(
        [sys.executable, "-c", f"{TAKE_LOCK}({str(folder)!r}))"],
        capture_output=True,
        text=True,
    )
    assert other.returncode == 1 and f"another process (pid {os.getpid()}) is writing" in other.stderr
    inner = RunFolderLock(folder / "variant")  # inside a folder this process holds: its own already
    inner.release()
    held.release()
    assert not (folder / LOCK_NAME).exists()
    again = subprocess.run(
        [sys.executable, "-c", f"{TAKE_LOCK}({str(folder)!r}))"],
        capture_output=True,
    )
    assert again.returncode == 0


def test_bench_refuses_a_symbolic_link_planted_in_its_out_folder(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "elsewhere.txt"
    target.write_text("not a run log\n")
    (out / "run.jsonl").symlink_to(target)
    quick = ["--set", "traffic.num_requests=3", "--set", "engine.simulation_speed=0"]
    assert main(["bench", *SIMULATED_IN_REAL_TIME, *quick, "--out", str(out)]) == 2
    assert f"{out / 'run.jsonl'}: a symbolic link in a run folder" in capsys.readouterr().err
    assert target.read_text() == "not a run log\n"
    with pytest.raises(ConfigError, match="a symbolic link; a run is written only into a plain folder"):
        linked = tmp_path / "linked"
        linked.symlink_to(out)
        RunFolderLock(linked)


def test_new_run_folders_never_reuse_an_existing_one(tmp_path):
    first = new_run_folder(tmp_path, "azure-conv / a100")
    (first / "run.jsonl").write_text("kept\n")
    second = new_run_folder(tmp_path, "azure-conv / a100")
    assert first != second and first.name.endswith("-azure-conv-a100") and second.name == first.name + "-2"
    assert (first / "run.jsonl").read_text() == "kept\n"
