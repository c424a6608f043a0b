"""Our engine in one loop thread, serving requests that come from the HTTP event loop.

The event loop never touches the engine: it sends commands (add, abort) through a queue and gets
each request's outputs on that request's own asyncio queue. The loop thread drains commands
between steps, steps while anything is unfinished, and hands every output to the event loop with
`call_soon_threadsafe`. A request's first event is either its first token(s) or its end (a
rejection comes back this way too, with the reason), so a handler can answer 400 before it starts
a stream.

A step that raises must not take the server down with it: every request in flight is aborted and
ends with an `EngineFailure` (the handler answers 500, or an error event mid-stream), and the loop
goes on serving. Only if the engine cannot even abort them does the loop stop; then `failure`
says why, /health answers 503 and new requests are refused.

While the decode graph compiles in the background (the default configuration's first seconds or
minutes), the loop takes requests but does not step: a step run beside the compile took 5 (median)
to 65 (90th percentile) times as long as a compiled one (docs/compiled-decode.md, "Warm-up: who
waits"), so requests wait for the compile instead, and /health answers 503 "warming up"
meanwhile, as vLLM's server does not answer before its own warm-up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import sys
import threading
import traceback

from engine import LLMEngine, SamplingParams
from engine.compile_cache import CompileProgress
from engine.outputs import RequestOutput
from workbench.server.metrics import ServerMetrics

_IDLE_WAIT_S = 0.05
_SHUTTING_DOWN = "the server is shutting down"


class EngineFailure(Exception):
    """A request's end when the step it was in raised (`status` 500), or when the server shuts
    down (503, whether the request was queued before the signal or came after it); delivered in
    place of a `RequestOutput`."""

    def __init__(self, message: str, status: int = 500):
        super().__init__(message)
        self.status = status


class EngineLoop:
    def __init__(self, engine: LLMEngine, model_name: str):
        self.engine, self.model_name = engine, model_name
        self.metrics = ServerMetrics(model_name, engine.config.block_size, engine.num_kv_blocks)
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._stopped = threading.Event()
        self._shutting_down = False  # set by "end all": later requests are refused
        self.failure: str | None = None  # why the loop stopped serving, if it did

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the loop and close the engine (its background compile is stopped and joined)."""
        self._stopped.set()
        self._commands.put(("stop", None, None))
        self._thread.join()
        self.engine.close()

    def warming_up(self) -> CompileProgress | None:
        """The decode graph's compile while it runs, during which no step is taken."""
        return self.engine.executor.compile_progress

    # ----- event loop side -----------------------------------------------------------------------

    async def submit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> asyncio.Queue:
        """Queue a request; its outputs arrive on the returned queue. Raises EngineError for what
        add_request refuses."""
        outputs: asyncio.Queue = asyncio.Queue()
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(("add", (request_id, prompt_token_ids, params, asyncio.get_running_loop(), outputs), done))
        await asyncio.wrap_future(done)
        return outputs

    def abort(self, request_id: str) -> None:
        """End a request whose client went away; its blocks are freed by the next step."""
        self._commands.put(("abort", request_id, None))

    def end_all_requests(self) -> None:
        """Abort every request and end its stream with "the server is shutting down" (safe from
        any thread): a shutdown waits for open requests, and one held while the graph compiles
        or a long stream would keep the process up for minutes. A request submitted after this
        is refused with the same words: the HTTP event loop it would answer on is closing (one
        added and stepped after it had closed stopped this thread)."""
        self._commands.put(("end all", None, None))

    # ----- loop thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        engine = self.engine
        warm = self.warming_up() is None
        while not self._stopped.is_set():
            if not warm and self.warming_up() is None:
                warm = True
                print(f"workbench serve: warm (decode {engine.executor.decode_mode}); serving", file=sys.stderr)
            busy = engine.has_unfinished() and warm
            try:
                command = self._commands.get(block=not busy, timeout=None if busy else _IDLE_WAIT_S)
            except queue.Empty:
                command = None
            if command is not None:
                self._handle(*command)
                continue
            if busy:
                try:
                    step = engine.step()
                except Exception as error:  # noqa: BLE001 - one failed step must not stop the server
                    self._fail_requests_in_flight(error)
                    continue
                self.metrics.step(step.stats, sum(len(output.new_token_ids) for output in step.outputs))
                for output in step.outputs:
                    self._deliver(output)
                if not engine.has_unfinished():
                    self.metrics.idle(engine.block_manager.num_used_blocks, engine.num_kv_blocks)
        self._end_open_streams(_SHUTTING_DOWN, 503)

    def _fail_requests_in_flight(self, error: Exception) -> None:
        """Abort every unfinished request (freeing its blocks) and end its stream with the error."""
        message = f"the engine step failed: {type(error).__name__}: {error}"
        print(f"workbench serve: {message}", file=sys.stderr)
        traceback.print_exc()
        try:
            for request_id in list(self._streams):
                self.engine.abort(request_id)
            self.engine.step()  # delivers the aborts and releases their blocks
        except Exception as abort_error:  # noqa: BLE001 - the engine is broken: stop serving, say why
            self.failure = f"{message}; aborting its requests failed too: {type(abort_error).__name__}: {abort_error}"
            self._stopped.set()
        self._end_open_streams(message)
        self.metrics.idle(self.engine.block_manager.num_used_blocks, self.engine.num_kv_blocks)

    def _end_open_streams(self, message: str, status: int = 500) -> None:
        streams, self._streams = self._streams, {}
        for loop, outputs in streams.values():
            if not loop.is_closed():  # at shutdown the HTTP event loop may have ended already
                loop.call_soon_threadsafe(outputs.put_nowait, EngineFailure(message, status))

    def _handle(self, kind: str, argument, done: concurrent.futures.Future | None) -> None:
        if kind == "add":
            request_id, prompt_token_ids, params, loop, outputs = argument
            if self._shutting_down:
                done.set_exception(EngineFailure(_SHUTTING_DOWN, 503))
                return
            try:
                self._streams[request_id] = (loop, outputs)
                self.engine.add_request(prompt_token_ids, params, request_id=request_id)
            except Exception as error:  # noqa: BLE001 - handed to the waiting handler, which answers 400
                self._streams.pop(request_id, None)
                done.set_exception(error)
                return
            self._count_waiting_while_warming_up()
            done.set_result(None)
        elif kind == "abort":
            self.engine.abort(argument)
            self._count_waiting_while_warming_up()  # a client that left no longer waits
        elif kind == "end all":
            self._shutting_down = True
            for request_id in list(self._streams):
                self.engine.abort(request_id)
            self._end_open_streams(_SHUTTING_DOWN, 503)

    def _count_waiting_while_warming_up(self) -> None:
        """No step updates the gauges until the compile ends: count the queues here meanwhile."""
        if self.warming_up() is not None:
            scheduler = self.engine.scheduler
            self.metrics.waiting.set(len(scheduler.waiting) + len(scheduler.waiting_long))

    def _deliver(self, output: RequestOutput) -> None:
        stream = self._streams.get(output.request_id)
        if output.finished:
            self._streams.pop(output.request_id, None)
            self.metrics.request_ended(output.metrics)
        if stream is not None:
            loop, outputs = stream
            loop.call_soon_threadsafe(outputs.put_nowait, output)
