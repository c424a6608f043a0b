"""Shared helpers for tests that need a real server: `workbench serve` in a subprocess on a free
loopback port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest

from engine.model_source import read_tokenizer


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition, what: str, limit_s: float = 120.0) -> None:
    """Poll until true; a hang detector for a server that never answers, not a timing assertion."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def launch(command: list[str], probe_url: str, what: str, limit_s: float = 120.0, **popen_options) -> subprocess.Popen:
    """Start a server process and wait until `probe_url` answers 200."""
    process = subprocess.Popen(command, **popen_options)

    def answering() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with code {process.returncode}")
        try:
            return httpx.get(probe_url, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answering, f"{what} to answer {probe_url}", limit_s)
    return process


def start_server(port: int, *extra: str) -> subprocess.Popen:
    """`workbench serve` on this port (its messages go to this test's output)."""
    command = [sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", "serve", "--port", str(port), *extra]
    return launch(command, f"http://127.0.0.1:{port}/health", "workbench serve")


@pytest.fixture(scope="module")
def server():
    """The bundled model served on loopback (a small KV cache and context keep it quick)."""
    port = free_port()
    process = start_server(port, "--set", "engine.max_model_len=512", "--set", "engine.kv_cache_memory=67108864")
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def tokenizer():
    return read_tokenizer("smollm2-135m")
