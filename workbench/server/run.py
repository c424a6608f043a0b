"""Start `workbench serve`: start the engine core in a process of its own, and run the HTTP API
with uvicorn in this one until interrupted."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import uvicorn

from engine import EngineConfig, EngineError
from engine.simulation import is_simulated, watched_in_real_time
from workbench.machine.process_tuning import allow_open_files
from workbench.server import CORE_STOP_WAIT_S, DEFAULT_MAX_REQUEST_BYTES
from workbench.server.engine_client import EngineCoreClient
from workbench.server.openai_api import create_app
from workbench.server.stop_signal import StopSignal, raise_stop


def served_name(model: str) -> str:
    """The name /v1/models gives: the alias, a file's or folder's name, or the simulated spec."""
    return model if is_simulated(model) or not Path(model).suffix and "/" not in model else Path(model).name


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the model loads: a port in use or an address this machine
    does not have is a one-line error at once, not a traceback after a minute of loading."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except OSError as error:
        raise EngineError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    return listener


def split_cores(reserved_cpus: int) -> tuple[list[int], list[int]] | None:
    """(the HTTP process's cores, the engine core's), or None to leave both on every core. The
    engine's compute threads wait for one another at every operator, so one that loses its core
    to the event loop or a client on the same machine stalls the step; pinned, each process keeps
    its own cores. The engine keeps at least one."""
    if reserved_cpus == 0:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    engine_count = max(1, len(cpus) - reserved_cpus)
    return cpus[: len(cpus) - engine_count] or cpus, cpus[len(cpus) - engine_count :]


class _Server(uvicorn.Server):
    """uvicorn's server, whose graceful shutdown first ends every request: it would otherwise wait
    for each open one to finish, however long that takes."""

    def __init__(self, config: uvicorn.Config, core: EngineCoreClient):
        super().__init__(config)
        self.core = core

    def handle_exit(self, sig: int, frame) -> None:
        self.core.end_all_requests()
        super().handle_exit(sig, frame)


def serve(
    config: EngineConfig,
    host: str,
    port: int,
    model_name: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    reserved_cpus: int = 0,
    core_stop_wait_s: float = CORE_STOP_WAIT_S,
) -> None:
    listener = listening_socket(host, port)
    cores = split_cores(reserved_cpus)
    core = None
    previous = {number: signal.signal(number, raise_stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        config = watched_in_real_time(config)  # a laptop stands in for the simulated GPU
        core = EngineCoreClient.start_process(
            config, model_name or served_name(config.model), None if cores is None else cores[1]
        )
        if cores is not None:
            os.sched_setaffinity(0, cores[0])
        allow_open_files()  # one socket per client stream
        where = "every core" if cores is None else f"cores {', '.join(map(str, cores[1]))}"
        print(
            f"serving {core.model_name} on http://{host}:{port} (OpenAI API under /v1, Prometheus metrics at /metrics; "
            f"the engine core in a process of its own on {where}, {reserved_cpus} core(s) left to HTTP)",
            file=sys.stderr,
            flush=True,
        )
        if (progress := core.warming_up()) is not None:
            print(f"warming up: {progress}; /health answers 503, requests wait", file=sys.stderr)
        server = _Server(uvicorn.Config(create_app(core, max_request_bytes), log_level="warning"), core)
        server.run(sockets=[listener])
    except StopSignal as stop:
        print(f"workbench serve: stopped ({stop})", file=sys.stderr)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if core is not None:
            core.stop(core_stop_wait_s)
        listener.close()
