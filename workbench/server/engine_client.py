"""The HTTP process's side of the engine core: start it, send it requests, hand each request's
outputs to the coroutine that streams them, keep the Prometheus metrics, and notice if it dies.

The event loop never waits on the core: commands are sent without blocking, and a receiver
thread reads the core's events and hands every output to the event loop with
`call_soon_threadsafe`. A submit sends the request and returns (as vLLM's add_request: no
acknowledgement is waited for). A request's first event is its first token(s) or its end: a
refusal comes back this way too, with its reason, so a handler can answer 400 before it starts a
stream.

The core runs in a process of its own (`start_process`, what `workbench serve` does) or in a
thread of this one (`start_in_thread`, over the same messages: the tests plant failures in an
engine they hold). A core process that exits without being asked to is a failure: its open
requests end with 500, `failure` says how it ended, /health answers 503 and new requests are
refused.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import zmq

from engine import EngineConfig, EngineError, LLMEngine, SamplingParams
from engine.loading.model_source import read_tokenizer
from engine.loading.tokenizer import Tokenizer
from engine.requests.outputs import RequestOutput
from engine.simulation import is_simulated
from workbench.server import CORE_STOP_WAIT_S
from workbench.server import core_protocol as protocol
from workbench.server.core_protocol import EndReason
from workbench.server.engine_core import SHUTTING_DOWN, CoreEndpoint
from workbench.server.metrics import ServerMetrics

_RECEIVE_POLL_MS = 100
_EXITED_CORE_LINGER_MS = 1500  # a core that exited may still deliver its last message (its linger: 1 s)
_KILL_WAIT_S = 2.0  # after SIGTERM, before SIGKILL (which also ends a stopped process)
_addresses = itertools.count()


class EngineFailure(Exception):
    """A request's end when the step it was in raised or the core died under it (FAILED), when
    the server shuts down (SHUTTING_DOWN, whether the request was queued before the signal or came
    after it), or a submission after the engine stopped serving (UNAVAILABLE); delivered in place
    of a `RequestOutput`."""

    def __init__(self, message: str, reason: EndReason):
        super().__init__(message)
        self.reason = reason


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    outputs: asyncio.Queue
    token_ids: list[int] = field(default_factory=list)  # the whole output so far


class EngineCoreClient:
    def __init__(self, model_name: str, tokenizer: Tokenizer | None):
        self.model_name, self.tokenizer = model_name, tokenizer
        self.failure: str | None = None  # why the core stopped serving, if it did
        self.shutting_down = False  # end_all_requests was called: every request is refused from then on
        self.max_model_len = 0
        self.metrics: ServerMetrics | None = None
        self._progress: str | None = None
        self._streams: dict[str, _Stream] = {}
        self._context = zmq.Context()
        self._commands = _socket(self._context, zmq.PUSH)
        self._events = _socket(self._context, zmq.PULL)
        self._send_lock = threading.Lock()  # commands come from the event loop, signal handlers and tests
        self._failing = threading.Lock()
        self._receiver = threading.Thread(target=self._receive, name="engine-core-events", daemon=True)
        self._stopping = threading.Event()
        self._process: subprocess.Popen | None = None
        self._core_thread: threading.Thread | None = None

    # ----- starting and stopping -----------------------------------------------------------------

    @classmethod
    def start_process(
        cls, config: EngineConfig, model_name: str, core_cpus: list[int] | None = None
    ) -> EngineCoreClient:
        """Start the core in a process of its own (pinned to `core_cpus`, if given) and wait until
        its engine is loaded; its tokenizer is read here meanwhile. Raises EngineError with the
        core's own words if the engine cannot be built."""
        client = cls(model_name, None)
        folder = Path(tempfile.mkdtemp(prefix="workbench-serve-"))
        commands_address, events_address = f"ipc://{folder}/commands", f"ipc://{folder}/events"
        client._commands.bind(commands_address)
        client._events.bind(events_address)
        command = [sys.executable, "-m", "workbench.server.engine_core", commands_address, events_address]
        command += [str(os.getpid()), *(str(cpu) for cpu in core_cpus or [])]
        client._process = subprocess.Popen(command, stdin=subprocess.PIPE)
        client._process.stdin.write(msgspec.msgpack.encode(config))
        client._process.stdin.close()
        try:
            if not is_simulated(config.model):
                client.tokenizer = read_tokenizer(config.model)
            client._wait_until_ready()
        except BaseException:
            client.stop()
            raise
        finally:
            for name in ("commands", "events"):
                (folder / name).unlink(missing_ok=True)  # connected: the sockets no longer need the names
            folder.rmdir()
        client._receiver.start()
        threading.Thread(target=client._watch_process, name="engine-core-watch", daemon=True).start()
        return client

    @classmethod
    def start_in_thread(cls, engine: LLMEngine, model_name: str) -> EngineCoreClient:
        """The core in a thread of this process, over the same messages (in memory)."""
        client = cls(model_name, engine.tokenizer)
        address = f"inproc://engine-core-{next(_addresses)}"
        client._commands.bind(f"{address}-commands")
        client._events.bind(f"{address}-events")
        commands, events = _socket(client._context, zmq.PULL), _socket(client._context, zmq.PUSH)
        commands.connect(f"{address}-commands")
        events.connect(f"{address}-events")
        core = CoreEndpoint(engine, commands, events)
        client._on_ready(core.ready())

        def run() -> None:
            try:
                core.run()
            finally:
                commands.close(linger=0)
                events.close(linger=1000)

        client._core_thread = threading.Thread(target=run, name="engine-core", daemon=True)
        client._core_thread.start()
        client._receiver.start()
        return client

    def _wait_until_ready(self) -> None:
        while not self._events.poll(_RECEIVE_POLL_MS):
            if (status := self._process.poll()) is not None:
                # A refusal is sent, then the core exits: under load its exit was seen before the
                # message arrived (1 run in 4), and the refusal was lost. The core's socket lingers
                # up to 1 s for its last message; wait as long before saying it sent none.
                if self._events.poll(_EXITED_CORE_LINGER_MS):
                    break
                raise EngineError(f"the engine core exited while loading ({_exit_status(status)}); its error is above")
        event = protocol.decode_event(self._events.recv())
        if isinstance(event, protocol.CoreStartFailed):
            raise EngineError(event.message)
        self._on_ready(event)

    def _on_ready(self, ready: protocol.CoreReady) -> None:
        self.max_model_len, self._progress = ready.max_model_len, ready.warming_up
        self.metrics = ServerMetrics(self.model_name, ready.block_size, ready.num_kv_blocks)

    def stop(self, wait_s: float = CORE_STOP_WAIT_S) -> None:
        """Stop the core (its background compile too) and wait `wait_s` for it; then kill it: a
        core that is stuck, or stopped (SIGSTOP), must not keep the server up."""
        self._stopping.set()
        self._send(protocol.StopCore())
        if self._core_thread is not None:
            self._core_thread.join()
        if self._process is not None:
            try:
                self._process.wait(timeout=1 if self.metrics is None else wait_s)
            except subprocess.TimeoutExpired:  # still loading, or stuck: SIGTERM, then SIGKILL
                print(f"workbench serve: the engine core did not stop within {wait_s:g} s; killing it", file=sys.stderr)
                self._process.terminate()
                try:
                    self._process.wait(timeout=_KILL_WAIT_S)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
        if self._receiver.is_alive():
            self._receiver.join()
        self._commands.close(linger=0)
        self._events.close(linger=0)
        self._context.term()

    def warming_up(self) -> str | None:
        """The decode graph's compile while it runs (during which no step is taken), in words."""
        return self._progress

    # ----- event loop side -----------------------------------------------------------------------

    def submit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> asyncio.Queue:
        """Send a request (from the event loop) and return the queue its outputs arrive on; what
        add_request refuses arrives there as an EngineFailure (REFUSED), its only output. Raises
        EngineFailure when the server is shutting down or the engine has stopped serving."""
        if self.shutting_down:
            raise EngineFailure(SHUTTING_DOWN, EndReason.SHUTTING_DOWN)
        if self.failure is not None:
            raise EngineFailure(self.failure, EndReason.UNAVAILABLE)
        outputs: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = _Stream(asyncio.get_running_loop(), outputs)
        self._send(protocol.AddRequest(request_id, prompt_token_ids, params))
        return outputs

    def abort(self, request_id: str) -> None:
        """End a request whose client went away; its blocks are freed by the next step."""
        self._streams.pop(request_id, None)
        self._send(protocol.AbortRequest(request_id))

    def end_all_requests(self) -> None:
        """End every request's stream with "the server is shutting down" now, here, and tell the
        core to abort them (safe from any thread): a shutdown waits for open requests, and one
        held while the graph compiles, a long stream, or a core that no longer answers (stuck,
        or stopped with SIGSTOP) would keep the process up for minutes or for ever. A request
        submitted after this is refused with the same words."""
        self.shutting_down = True
        self._end_streams(list(self._streams), EngineFailure(SHUTTING_DOWN, EndReason.SHUTTING_DOWN))
        self._send(protocol.EndAllRequests())

    def _send(self, command) -> None:
        with self._send_lock:
            if self._commands.closed:
                return
            try:
                self._commands.send(protocol.encode(command), zmq.NOBLOCK)
            except zmq.Again:  # no core connected (it died, or never started): nobody would read it
                pass

    # ----- receiver thread -----------------------------------------------------------------------

    def _receive(self) -> None:
        while True:
            if not self._events.poll(_RECEIVE_POLL_MS):
                if self._stopping.is_set() and (self._process is None or self._process.poll() is not None):
                    if self._core_thread is None or not self._core_thread.is_alive():
                        return
                continue
            event = protocol.decode_event(self._events.recv())
            if isinstance(event, protocol.StepDone):
                self._on_step(event)
            elif isinstance(event, protocol.WarmUp):
                self._progress = event.progress
                self.metrics.waiting.set(event.num_waiting)
            elif isinstance(event, protocol.StepFailed):
                self._end_streams(event.request_ids, EngineFailure(event.message, EndReason.FAILED))
                self.metrics.idle(event.kv_blocks_used)
            elif isinstance(event, protocol.RequestsEnded):
                self._end_streams(event.request_ids, EngineFailure(event.message, event.reason))
            elif isinstance(event, protocol.CoreStopped) and event.failure is not None:
                self._fail(event.failure)

    def _on_step(self, step: protocol.StepDone) -> None:
        metrics = self.metrics
        metrics.step(step.stats, step.generated_tokens)
        for delta in step.outputs:
            if delta.finished:
                metrics.request_ended(delta.metrics)
                stream = self._streams.pop(delta.request_id, None)
            else:
                stream = self._streams.get(delta.request_id)
            if stream is None:
                continue  # aborted: its client has gone
            stream.token_ids += delta.new_token_ids
            output = RequestOutput(
                delta.request_id,
                delta.new_token_ids,
                stream.token_ids,  # the same list, grown in place: nothing is copied per step
                delta.finished,
                delta.finish_reason,
                delta.text,
                delta.metrics,
                delta.new_text,
            )
            stream.loop.call_soon_threadsafe(stream.outputs.put_nowait, output)
        if step.idle_kv_blocks_used is not None:
            metrics.idle(step.idle_kv_blocks_used)

    def _end_streams(self, request_ids, failure: EngineFailure) -> None:
        for request_id in request_ids:
            stream = self._streams.pop(request_id, None)
            if stream is not None and not stream.loop.is_closed():  # at shutdown the event loop may have ended
                stream.loop.call_soon_threadsafe(stream.outputs.put_nowait, failure)

    def _fail(self, failure: str) -> None:
        """The core stopped serving: end every open request and refuse later ones. Only the first
        word counts: a core that stops serving then exits, and its exit says less."""
        with self._failing:  # the receiver thread and the process watcher may both say it
            if self.failure is not None:
                return
            self.failure = failure
        print(f"workbench serve: {failure}", file=sys.stderr)
        self._end_streams(list(self._streams), EngineFailure(self.failure, EndReason.FAILED))

    def _watch_process(self) -> None:
        status = self._process.wait()
        if not self._stopping.is_set():
            self._fail(f"the engine core process exited unexpectedly ({_exit_status(status)})")


def _socket(context: zmq.Context, kind: int) -> zmq.Socket:
    """A socket that queues without limit: a send must never block the event loop (1,500 requests
    can arrive while a step runs, past ZeroMQ's default of 1,000 queued messages)."""
    socket = context.socket(kind)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    return socket


def _exit_status(status: int) -> str:
    return f"killed by {signal.Signals(-status).name}" if status < 0 else f"exit status {status}"
