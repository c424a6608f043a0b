"""Every entry point on the default configuration (decode compiled in the background), ended while
the compile still runs: each exits with its own status (they aborted with 134, "terminate called
without an active exception"). An empty inductor cache keeps the compile running for minutes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from benchmarks.server_processes import free_port, launch
from engine.config import COMPILE_DECODE_ENVIRONMENT

pytestmark = pytest.mark.slow  # loads SmolLM2 and starts its compile in each process


def default_environment(tmp_path) -> dict:
    environment = {key: value for key, value in os.environ.items() if key != COMPILE_DECODE_ENVIRONMENT}
    environment.update(
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        QT_QPA_PLATFORM="offscreen",
        WORKBENCH_SETTINGS=str(tmp_path / "settings.ini"),
    )
    return environment


def workbench(*arguments: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", *arguments]


def test_gui_run_for_exits_cleanly_while_the_graph_compiles(tmp_path):
    screenshot = tmp_path / "window.png"
    finished = subprocess.run(
        workbench("gui", "--preset", "chat-burst", "--run-for", "3", "--screenshot", str(screenshot)),
        env=default_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert screenshot.stat().st_size > 10_000 and "terminate called" not in finished.stderr


def test_bench_exits_cleanly_while_the_graph_compiles(tmp_path):
    finished = subprocess.run(
        workbench(
            "bench",
            "--preset",
            "chat-burst",
            "--set",
            "engine.compile_decode=background",
            "--set",
            "traffic.num_requests=3",
            "--no-plots",
            "--out",
            str(tmp_path / "run"),
        ),
        env=default_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert (tmp_path / "run" / "report.json").exists() and "terminate called" not in finished.stderr


def test_serve_stops_on_sigterm_while_the_graph_compiles(tmp_path):
    port = free_port()
    process = launch(
        workbench("serve", "--port", str(port)),
        f"http://127.0.0.1:{port}/health",
        "workbench serve",
        env=default_environment(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "Hello", "max_tokens": 4}, timeout=60
        )
        assert answer.status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert "terminate called" not in process.stderr.read()
    finally:
        process.kill()
