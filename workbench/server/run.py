"""Start `workbench serve`: load the engine, put it in its loop thread, and run the HTTP API with
uvicorn until interrupted."""

from __future__ import annotations

import dataclasses
import signal
import socket
import sys
from pathlib import Path

import torch
import uvicorn

from engine import EngineConfig, EngineError, LLMEngine
from engine.simulation import is_simulated
from workbench.process_tuning import allow_open_files, freeze_loaded_heap
from workbench.server import DEFAULT_MAX_REQUEST_BYTES
from workbench.server.engine_loop import EngineLoop
from workbench.server.openai_api import create_app


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


def leave_cores_to_http(reserved_cpus: int) -> int:
    """Run the engine's compute on all cores but `reserved_cpus`; the threads it keeps. Its threads
    wait for one another at every operator, so one that loses its core to the HTTP event loop or a
    client on the same machine stalls the step (docs/servers.md: on 2 cores, the decode steps
    were faster with one thread, the served latency inconclusive, so the default reserves none)."""
    threads = max(1, torch.get_num_threads() - reserved_cpus)
    torch.set_num_threads(threads)
    return threads


class _StopSignal(BaseException):
    """SIGINT or SIGTERM: uvicorn finishes its graceful shutdown, then raises the signal again,
    which lands here as this exception so that the engine loop and its compile are stopped too
    and the process exits with status 0 (the default handlers killed it, or printed a traceback).
    A BaseException, as KeyboardInterrupt is: an `except Exception` on the load path (a build that
    may fail) took a stop at warm-up for a failed build, and the server served on."""


def _raise_stop(signum: int, frame) -> None:
    raise _StopSignal(signal.Signals(signum).name)


class _Server(uvicorn.Server):
    """uvicorn's server, whose graceful shutdown first ends every request: it would otherwise wait
    for each open one to finish, however long that takes."""

    def __init__(self, config: uvicorn.Config, loop: EngineLoop):
        super().__init__(config)
        self.engine_loop = loop

    def handle_exit(self, sig: int, frame) -> None:
        self.engine_loop.end_all_requests()
        super().handle_exit(sig, frame)


def serve(
    config: EngineConfig,
    host: str,
    port: int,
    model_name: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    reserved_cpus: int = 0,
) -> None:
    listener = listening_socket(host, port)
    threads = leave_cores_to_http(reserved_cpus)
    loop = None
    previous = {number: signal.signal(number, _raise_stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        if is_simulated(config.model):
            # Served in real time (a laptop stands in for the simulated GPU), unless a speed was chosen.
            config = dataclasses.replace(config, simulation_speed=config.simulation_speed or 1.0)
        engine = LLMEngine(
            config,
            progress=lambda stage, fraction: (
                print(f"loading: {stage} {fraction:.0%}", file=sys.stderr) if fraction in (0.0, 1.0) else None
            ),
        )
        loop = EngineLoop(engine, model_name or served_name(config.model))
        allow_open_files()  # one socket per client stream
        freeze_loaded_heap()  # no full collection walks the model again while requests run
        loop.start()
        print(
            f"serving {loop.model_name} on http://{host}:{port} (OpenAI API under /v1, Prometheus metrics at /metrics; "
            f"engine compute on {threads} thread{'s' if threads > 1 else ''}, {reserved_cpus} core(s) left to HTTP)",
            file=sys.stderr,
            flush=True,
        )
        if (progress := loop.warming_up()) is not None:
            print(f"warming up: {progress.describe()}; /health answers 503, requests wait", file=sys.stderr)
        server = _Server(uvicorn.Config(create_app(loop, max_request_bytes), log_level="warning"), loop)
        server.run(sockets=[listener])
    except _StopSignal as stop:
        print(f"workbench serve: stopped ({stop})", file=sys.stderr)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if loop is not None:
            loop.stop()
        listener.close()
