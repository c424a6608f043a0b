"""`StopSignal`: SIGINT or SIGTERM turned into an exception that unwinds a serve process.

Both processes of `workbench serve` use it. In the HTTP process, uvicorn finishes its graceful
shutdown, then raises the signal again, which lands as this exception so that the engine loop
and its compile are stopped too and the process exits with status 0 (the default handlers killed
it, or printed a traceback). In the engine core, SIGTERM from the HTTP process (a stop while the
engine still loads) leaves at once. A BaseException, as KeyboardInterrupt is: an `except
Exception` on a load path (a build that may fail) must not take a stop for a failed build and
serve on."""

from __future__ import annotations

import signal


class StopSignal(BaseException):
    pass


def raise_stop(signum: int, frame) -> None:
    """A signal handler: raise StopSignal named after the signal."""
    raise StopSignal(signal.Signals(signum).name)
