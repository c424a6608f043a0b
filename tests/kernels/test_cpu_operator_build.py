"""The CPU paged-attention operator's build never hangs an engine and never eats a stop: a real
stale lock file left by a build that was killed, a lock held too long, and a real SIGTERM sent to
`workbench serve` while it builds the operator at warm-up."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys

import pytest

from benchmarks.server_processes import free_port, wait_until
from kernels import cpu_operators
from workbench.server.stop_signal import StopSignal

LOAD = "from kernels.cpu_operators import available, unavailable_reason; print(available(), unavailable_reason())"


def build_directory(root):
    return root / f"workbench_cpu_operators_{cpu_operators._machine_tag()}"


def load_in_a_process(root) -> str:
    """available() in a fresh process with its own extension cache; a hang fails at the timeout."""
    done = subprocess.run(
        [sys.executable, "-c", LOAD],
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(root)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_stale_lock_left_by_a_killed_build_does_not_hang_the_next_engine(tmp_path):
    """torch's baton is a plain file it waits on forever: a build killed mid-way left it, and
    every later engine on the machine stopped at "warm up 0%"."""
    directory = build_directory(tmp_path)
    directory.mkdir(parents=True)
    (directory / "lock").write_text("")  # what a SIGKILLed build leaves
    assert load_in_a_process(tmp_path) == "True"
    assert not (directory / "lock").exists() and (directory / "built.json").exists()
    (directory / "lock").write_text("")  # left again: a current build is loaded without any lock
    assert load_in_a_process(tmp_path) == "True"


def test_a_build_lock_held_too_long_gives_up_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_operators, "_state", {})
    monkeypatch.setattr(cpu_operators, "LOCK_TIMEOUT_S", 0.3)
    directory = build_directory(tmp_path)
    directory.mkdir(parents=True)
    with (directory / "build.flock").open("a") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another process building, for ever
        with pytest.warns(RuntimeWarning, match="could not be built"):
            assert not cpu_operators.available()
    reason = cpu_operators.unavailable_reason()
    assert reason.startswith(f"TimeoutError: {directory / 'build.flock'}: another process has held the build lock")


class Cancelled(Exception):
    pass


def test_a_wait_for_the_lock_is_told_and_ends_when_the_caller_says_so(tmp_path, monkeypatch):
    """A load sat at "warm up 75%" for minutes, saying nothing, and Cancel load did nothing."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_operators, "_state", {})
    directory = build_directory(tmp_path)
    directory.mkdir(parents=True)
    told = []

    def on_wait(lock, waited):
        told.append((lock, waited))
        if len(told) == 2:
            raise Cancelled

    with (directory / "build.flock").open("a") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another process building
        with pytest.raises(Cancelled):
            cpu_operators.available(on_wait)
    assert [lock for lock, _ in told] == [directory / "build.flock"] * 2
    assert told[0][1] < 1 <= told[1][1] < 2  # once a second, from the start
    assert "loaded" not in cpu_operators._state  # not taken for a failed build: the next load tries again


def test_a_stop_is_no_failed_build():
    # An `except Exception` around the build took workbench serve's stop for a failed build.
    assert issubclass(StopSignal, BaseException) and not issubclass(StopSignal, Exception)


def test_sigterm_while_the_operator_builds_at_warm_up_stops_the_server(tmp_path, tiny_llama):
    """It printed "could not be built (StopSignal: SIGTERM)", went on loading and served 200s."""
    model, _ = tiny_llama
    command = [sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", "serve"]
    command += ["--port", str(free_port()), "--set", f"engine.model={model}", "--set", "engine.compile_decode=off"]
    server = subprocess.Popen(
        command,
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)},  # empty: the operator is built now
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []
        for line in server.stderr:
            seen.append(line)
            if "warm up 0%" in line:  # the first paged attention of the warm-up builds the operator
                break
        # torch's baton exists while ninja compiles: the signal lands in the build itself.
        wait_until(lambda: (build_directory(tmp_path) / "lock").exists(), "the operator's build to start", 120)
        assert not (build_directory(tmp_path) / "built.json").exists(), "the build ended before the signal"
        server.send_signal(signal.SIGTERM)
        _, rest = server.communicate(timeout=120)  # a swallowed stop serves on: TimeoutExpired
        assert server.returncode == 0
    finally:
        server.kill()
        server.communicate()
    output = "".join(seen) + rest
    assert "workbench serve: stopped (SIGTERM)" in output, output
    assert "serving " not in output and "could not be built" not in output, output
