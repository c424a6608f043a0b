"""`workbench serve`'s engine core in a process of its own, for real: pinned to the cores it was
given, detected when it dies, gone when the server that started it is gone; and its messages,
which carry only the declared types."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import msgspec
import pytest

from benchmarks.server_processes import free_port, start_workbench_server, wait_until
from engine import SamplingParams
from engine.errors import ConfigError, EngineError
from tests.workbench.loopback_app import server_state
from workbench.server import core_protocol as protocol

SIMULATED = ("--set", "engine.model=simulated:llama-2-7b@h100-80gb")


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def test_a_core_that_dies_ends_its_requests_and_health_says_so():
    port = free_port()
    server = start_workbench_server(port, *SIMULATED)
    url = f"http://127.0.0.1:{port}"
    try:
        (core,) = children(server.pid)
        body = {"prompt": list(range(1, 30)), "max_tokens": 4000, "ignore_eos": True}
        answers = []
        sender = threading.Thread(
            target=lambda: answers.append(httpx.post(f"{url}/v1/completions", json=body, timeout=60))
        )
        sender.start()
        wait_until(lambda: server_state(url).num_running == 1, "the request to run")
        os.kill(core, signal.SIGKILL)
        sender.join(timeout=60)
        assert answers and answers[0].status_code == 500
        assert (
            "the engine core process exited unexpectedly (killed by SIGKILL)" in answers[0].json()["error"]["message"]
        )
        health = httpx.get(f"{url}/health")
        assert health.status_code == 503
        assert "killed by SIGKILL" in health.json()["error"]["message"]
        refused = httpx.post(f"{url}/v1/completions", json={**body, "max_tokens": 2}, timeout=30)
        assert refused.status_code == 503 and refused.json()["error"]["type"] == "ServiceUnavailableError"
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0  # the server still stops cleanly


def test_the_core_leaves_when_the_server_that_started_it_is_killed():
    port = free_port()
    server = start_workbench_server(port, *SIMULATED)
    (core,) = children(server.pid)
    body = {"prompt": list(range(1, 30)), "max_tokens": 4000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60) as stream:
        next(stream.iter_lines())  # the core is busy stepping
        server.kill()
        server.wait()
    deadline = time.monotonic() + 30
    while alive(core) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(core)


def test_sigterm_ends_every_stream_at_once_and_kills_a_stopped_core(tmp_path):
    """Issue 58 #6: with the core stopped (SIGSTOP) and 20 streams open, SIGTERM ended nothing in
    90 s and the server was still up at 120 s: the streams waited for the core to end them. They
    now end at once with 503, and the core, which cannot stop itself, is killed after
    --core-stop-timeout (docs/servers.md)."""
    port = free_port()
    server = start_workbench_server(port, *SIMULATED, "--core-stop-timeout", "3")
    url = f"http://127.0.0.1:{port}"
    (core,) = children(server.pid)
    body = {"prompt": list(range(1, 30)), "max_tokens": 4000, "ignore_eos": True, "stream": True}
    ends: list[tuple[float, str]] = []

    def stream() -> None:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as answer:
            lines = [line for line in answer.iter_lines() if line]
        ends.append((time.monotonic(), "\n".join(lines[-2:])))

    senders = [threading.Thread(target=stream) for _ in range(20)]
    for sender in senders:
        sender.start()
    try:
        wait_until(lambda: server_state(url).num_running + server_state(url).num_waiting == 20, "20 streams")
        os.kill(core, signal.SIGSTOP)
        signalled = time.monotonic()
        server.send_signal(signal.SIGTERM)
        for sender in senders:
            sender.join(timeout=30)
        assert len(ends) == 20 and max(at for at, _ in ends) - signalled < 10
        assert all("the server is shutting down" in last and "503" in last for _, last in ends), ends[0][1][-300:]
        assert server.wait(timeout=30) == 0
        assert time.monotonic() - signalled < 25 and not alive(core)
    finally:
        if alive(core):
            os.kill(core, signal.SIGKILL)
        server.kill()


def test_a_client_gone_before_its_first_output_is_aborted_while_it_waits():
    """Issue 58: a planted bug (no abort for a client that leaves before its first output) was
    caught only by a 12-minute test on the bundled model. Here, on a simulated GPU with one
    sequence slot: a request queued behind a long one, whose client gives up, leaves the queue at
    once instead of running when its turn comes."""
    port = free_port()
    server = start_workbench_server(port, *SIMULATED, "--set", "engine.max_num_seqs=1")
    url = f"http://127.0.0.1:{port}"
    long_body = {"prompt": list(range(1, 30)), "max_tokens": 4000, "ignore_eos": True}
    try:
        runner = threading.Thread(
            target=lambda: httpx.post(f"{url}/v1/completions", json=long_body, timeout=120), daemon=True
        )
        runner.start()
        wait_until(lambda: server_state(url).num_running == 1, "the long request to run")
        with pytest.raises(httpx.ReadTimeout):  # the client gives up before any output
            httpx.post(f"{url}/v1/completions", json={**long_body, "max_tokens": 4}, timeout=1.0)
        wait_until(lambda: server_state(url).num_waiting == 0, "the abandoned request to leave the queue", 10)
        assert server_state(url).num_running == 1  # the long one still runs: the queue emptied by the abort
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs at least two cores")
def test_reserved_cpus_pin_the_core_and_the_http_process_apart():
    port = free_port()
    cpus = sorted(os.sched_getaffinity(0))
    server = start_workbench_server(port, *SIMULATED, "--reserved-cpus", "1")
    try:
        (core,) = children(server.pid)
        assert os.sched_getaffinity(core) == set(cpus[1:])
        assert os.sched_getaffinity(server.pid) == {cpus[0]}
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0


def test_messages_decode_to_the_declared_types_only():
    command = protocol.AddRequest("r1", [1, 2, 3], SamplingParams(max_tokens=4, stop=["\n"]))
    assert protocol.decode_command(protocol.encode(command)) == command
    with pytest.raises(msgspec.ValidationError, match="Invalid value 'exec'"):
        protocol.decode_command(msgspec.msgpack.encode({"type": "exec", "code": "import os"}))
    with pytest.raises(ConfigError, match="max_tokens: expected a positive integer"):  # checked on arrival too
        bad = msgspec.msgpack.encode(
            {"type": "add", "request_id": "r", "prompt_token_ids": [1], "params": {"max_tokens": 0}}
        )
        protocol.decode_command(bad)


class _ExitedCore:
    """A core process that has exited (status 1)."""

    def poll(self):
        return 1


class _LateEvents:
    """The events socket as the race left it: the refusal arrives just after the wait that saw
    nothing, before the parent sees the exit."""

    def __init__(self, message: bytes):
        self.message, self.polls = message, 0

    def poll(self, timeout_ms):
        self.polls += 1
        return self.polls > 1

    def recv(self):
        return self.message


def test_a_load_refusal_that_arrives_after_the_core_exited_is_still_said():
    """Issue 77 #13: under load, serve said "exited while loading (exit status 1); its error is
    above" with nothing above (1 run in 4): the core's refusal arrived after its exit was seen."""
    from workbench.server.engine_client import EngineCoreClient

    client = EngineCoreClient.__new__(EngineCoreClient)
    client._process = _ExitedCore()
    client._events = _LateEvents(protocol.encode(protocol.CoreStartFailed("kv_cache_dtype: the CPU's attention")))
    with pytest.raises(EngineError, match="^kv_cache_dtype: the CPU's attention$"):
        client._wait_until_ready()
