"""An ASGI app served by uvicorn in a thread of the test process, on a free loopback port: for
`workbench serve`'s app over an engine the test controls, and for fake servers that misbehave."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import httpx
import uvicorn

from benchmarks.server_processes import wait_until
from workbench.backends.server_state import ServerState, parse_server_state


@contextlib.contextmanager
def served(app) -> Iterator[str]:
    """The app's base URL while the block runs; the server is stopped after it."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=5)
    )
    thread = threading.Thread(target=server.run, name="loopback server", daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), "the loopback server to start", 30)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def server_state(url: str) -> ServerState:
    """What a server's /metrics says now. A server streaming to 1,500 clients on two cores took
    over httpx's default 5 s to answer on a loaded machine: the wait is generous, as this is a
    probe, not a timing."""
    return parse_server_state(httpx.get(f"{url}/metrics", timeout=120).text)
