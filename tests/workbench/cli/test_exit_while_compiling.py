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
from engine.configuration.config import COMPILE_DECODE_ENVIRONMENT

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
        warming = "warming up before the run: compiling the decode and prefill graphs: "
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
    """While the graph compiles, /health says "warming up" (503) and requests wait, counted in
    vllm:num_requests_waiting until their clients leave; SIGTERM ends the one still held with a
    503 at once (it got 500, as if the server had failed), nothing on stderr reads as a crash, and
    the process exits 0 (it waited for the held request)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = launch(
        workbench("serve", "--port", str(port)),
        f"{url}/v1/models",  # answers while warming up; /health does not
        "workbench serve",
        env=default_environment(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )

    def waiting(count: int) -> bool:
        return f'vllm:num_requests_waiting{{model_name="smollm2-135m"}} {count:.1f}' in httpx.get(f"{url}/metrics").text

    def ask(answers: list, timeout_s: float) -> threading.Thread:
        def post():
            try:
                answers.append(
                    httpx.post(f"{url}/v1/completions", json={"prompt": "Hello", "max_tokens": 4}, timeout=timeout_s)
                )
            except httpx.TimeoutException as error:  # the client gives up and closes its connection
                answers.append(error)

        thread = threading.Thread(target=post)
        thread.start()
        return thread

    try:
        health = httpx.get(f"{url}/health")
        assert health.status_code == 503
        assert health.json()["error"]["message"].startswith("warming up: compiling the decode and prefill graphs: ")
        answers, left = [], []
        held = ask(answers, timeout_s=60)
        wait_until(lambda: waiting(1), "the request to wait")
        leaving = ask(left, timeout_s=2)
        wait_until(lambda: waiting(2), "the second request to wait")
        leaving.join(timeout=10)
        assert isinstance(left[0], httpx.TimeoutException)
        wait_until(lambda: waiting(1), "the gauge to forget the client that left")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        held.join(timeout=10)
        assert answers[0].status_code == 503 and answers[0].json()["error"]["message"] == "the server is shutting down"
        said = process.stderr.read()
        assert "terminate called" not in said and "Exception ignored" not in said and "Traceback" not in said, said
    finally:
        process.kill()
