"""Every entry point on the default configuration (decode compiled in the background), ended while
the compile still runs: each exits with its own status (they aborted with 134, "terminate called
without an active exception"). An empty inductor cache keeps the compile running for minutes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import httpx
import pytest

from benchmarks.server_processes import free_port, launch, wait_until
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


def test_bench_waits_for_the_compile_and_ctrl_c_meanwhile_exits_cleanly(tmp_path):
    """bench measures the compiled engine: it says it is warming up and starts nothing until the
    compile ends; Ctrl-C meanwhile exits with 130 (not 134) and says that nothing ran."""
    process = subprocess.Popen(
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
        stderr=subprocess.PIPE,
        text=True,
        # A child inherits an ignored SIGINT, and something earlier in the suite leaves the test
        # process ignoring it (bench then compiled on after Ctrl-C); a user's shell does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    said = []  # every line of its stderr, read by a thread so that the pipe never fills
    reader = threading.Thread(target=lambda: said.extend(process.stderr), daemon=True)
    reader.start()
    try:
        warming = "warming up before the run: compiling the decode graph: "
        wait_until(lambda: any(line.startswith(warming) for line in said), "bench to say it is warming up", 240)
        process.send_signal(signal.SIGINT)
        status = process.wait(timeout=120)
        reader.join(timeout=10)
        assert status == 130, "".join(said)[-3000:]
        assert "chat-burst did not start" in "".join(said) and "terminate called" not in "".join(said)
        assert not (tmp_path / "run" / "run.jsonl").exists()
    finally:
        process.kill()


def test_serve_warms_up_before_serving_and_stops_on_sigterm_meanwhile(tmp_path):
    """While the graph compiles, /health says "warming up" (503) and a request waits; SIGTERM
    ends it with an error at once and the process exits 0 (it waited for the held request)."""
    port = free_port()
    process = launch(
        workbench("serve", "--port", str(port)),
        f"http://127.0.0.1:{port}/v1/models",  # answers while warming up; /health does not
        "workbench serve",
        env=default_environment(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        health = httpx.get(f"http://127.0.0.1:{port}/health")
        assert health.status_code == 503
        assert health.json()["error"]["message"].startswith("warming up: compiling the decode graph: ")
        answers = []
        held = threading.Thread(
            target=lambda: answers.append(
                httpx.post(
                    f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "Hello", "max_tokens": 4}, timeout=60
                )
            )
        )
        held.start()
        waiting = 'vllm:num_requests_waiting{model_name="smollm2-135m"} 1.0'
        wait_until(lambda: waiting in httpx.get(f"http://127.0.0.1:{port}/metrics").text, "the request to wait")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        held.join(timeout=10)
        assert answers[0].status_code == 500 and answers[0].json()["error"]["message"] == "the server is shutting down"
        assert "terminate called" not in process.stderr.read()
    finally:
        process.kill()
