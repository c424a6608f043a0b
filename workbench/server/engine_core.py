"""`workbench serve`'s engine core in a process of its own (vLLM's multiprocess EngineCore): the
engine core (engine/core.py) at the far end of two ZeroMQ sockets.

The HTTP process (uvicorn, the event loop, tokenizing, streaming, /metrics) has its own GIL and
cores; this process owns the engine and nothing else. It reads commands between steps, steps
while the core is ready to, and sends one message per step with every request's new tokens and
the step's statistics (core_protocol.py says what travels and how). The rules (held until warm,
a failed step failing its requests, ending at stop) are the core's; this module turns them into
messages: a failed step is a `StepFailed` (the HTTP side answers 500, or an error event
mid-stream), a broken engine a `CoreStopped`, and while the compile runs its progress goes out
about once a second for /health.

Run as `python -m workbench.server.engine_core` by `EngineCoreClient`, which hands it the engine
settings as MessagePack on stdin; or in a thread of the caller's process (`CoreEndpoint.run`)
with an engine the caller built, which is how the tests plant failures in a step.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import msgspec
import torch
import zmq

from engine import EngineConfig, EngineError, LLMEngine
from engine.core import EngineBroken, EngineCore, ShuttingDown
from engine.requests.outputs import RequestOutput
from workbench.machine.process_tuning import freeze_loaded_heap
from workbench.server import core_protocol as protocol
from workbench.server.stop_signal import StopSignal, raise_stop

_IDLE_POLL_MS = 50
_WARM_UP_REPORT_S = 1.0
SHUTTING_DOWN = "the server is shutting down"


class CoreEndpoint:
    def __init__(self, engine: LLMEngine, commands: zmq.Socket, events: zmq.Socket, parent_pid: int | None = None):
        self.core = EngineCore(engine)
        self._commands, self._events = commands, events
        self._parent_pid = parent_pid  # a core process ends when the server that started it has gone
        self._stopped = False
        self._last_warm_up_report = 0.0

    def ready(self) -> protocol.CoreReady:
        engine = self.core.engine
        return protocol.CoreReady(
            max_model_len=engine.max_model_len,
            block_size=engine.config.block_size,
            num_kv_blocks=engine.num_kv_blocks,
            warming_up=self._progress(),
        )

    def run(self) -> None:
        """Serve commands until StopCore (or until the engine is broken), then close the engine
        (its background compile is stopped and joined)."""
        core = self.core
        warm = self._progress() is None
        try:
            while not self._stopped:
                if not warm:
                    warm = self._report_warm_up()
                busy = core.ready_to_step()
                if self._commands.poll(0 if busy else _IDLE_POLL_MS):
                    self._handle(protocol.decode_command(self._commands.recv()))
                    continue
                if self._parent_pid is not None and os.getppid() != self._parent_pid:
                    break  # the HTTP process died without stopping us: nobody reads what we send
                if busy:
                    self._step()
        finally:
            core.close()

    def _send(self, event) -> None:
        self._events.send(protocol.encode(event))

    def _progress(self) -> str | None:
        progress = self.core.warm_up_progress()
        return None if progress is None else progress.describe()

    def _report_warm_up(self, now: bool = False) -> bool:
        """Send the compile's progress about once a second (at once if `now`); True once warm."""
        progress = self._progress()
        if progress is None or now or time.monotonic() - self._last_warm_up_report >= _WARM_UP_REPORT_S:
            scheduler = self.core.engine.scheduler
            waiting = len(scheduler.waiting) + len(scheduler.waiting_long)
            self._send(protocol.WarmUp(progress, waiting))
            self._last_warm_up_report = time.monotonic()
            if progress is None:
                executor = self.core.engine.executor
                print(
                    f"workbench serve: warm (decode {executor.decode_mode}, prefill {executor.prefill_mode}); serving",
                    file=sys.stderr,
                )
        return progress is None

    def _step(self) -> None:
        engine = self.core.engine
        try:
            step = self.core.step()
        except EngineBroken as broken:
            self._send(protocol.StepFailed(broken.request_ids, str(broken), engine.block_manager.num_used_blocks))
            self._send(protocol.CoreStopped(str(broken)))
            self._stopped = True
            return
        outputs = step.result.outputs
        if step.failure is not None:
            ended = [output.request_id for output in outputs if output.finished]
            self._send(protocol.StepFailed(ended, step.failure, engine.block_manager.num_used_blocks))
            return
        deltas = [self._delta(output) for output in outputs]
        idle = None if engine.has_unfinished() else engine.block_manager.num_used_blocks
        generated = sum(len(output.new_token_ids) for output in outputs)
        self._send(protocol.StepDone(deltas, step.result.stats, generated, idle))

    @staticmethod
    def _delta(output: RequestOutput) -> protocol.OutputDelta:
        if not output.finished:
            return protocol.OutputDelta(output.request_id, output.new_token_ids, output.new_text, False)
        return protocol.OutputDelta(
            output.request_id,
            output.new_token_ids,
            output.new_text,
            True,
            output.finish_reason,
            output.text,
            output.metrics,
        )

    def _handle(self, command) -> None:
        if isinstance(command, protocol.AddRequest):
            self._add(command)
        elif isinstance(command, protocol.AbortRequest):
            self.core.abort(command.request_id)
            if self._progress() is not None:
                self._report_warm_up(now=True)  # a client that left no longer waits
        elif isinstance(command, protocol.EndAllRequests):
            ended = self.core.end_all()
            self._send(protocol.RequestsEnded(ended, SHUTTING_DOWN, protocol.EndReason.SHUTTING_DOWN))
        elif isinstance(command, protocol.StopCore):
            self._stopped = True

    def _add(self, command: protocol.AddRequest) -> None:
        try:
            self.core.add_request(command.prompt_token_ids, command.params, request_id=command.request_id)
        except ShuttingDown:
            self._send(protocol.RequestsEnded([command.request_id], SHUTTING_DOWN, protocol.EndReason.SHUTTING_DOWN))
            return
        except EngineError as error:  # the request's only answer: its end, as its first output
            self._send(protocol.RequestsEnded([command.request_id], str(error), protocol.EndReason.REFUSED))
            return
        if self._progress() is not None:
            self._report_warm_up(now=True)  # no step updates the gauges until the compile ends


def main() -> int:
    """The core process: `python -m workbench.server.engine_core COMMANDS_ADDRESS EVENTS_ADDRESS
    PARENT_PID [CPU ...]`, the engine settings as MessagePack on stdin."""
    commands_address, events_address, parent_pid, *cpus = sys.argv[1:]
    # Ctrl-C reaches the whole process group: the HTTP process decides when the core stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, raise_stop)
    config = msgspec.msgpack.decode(sys.stdin.buffer.read(), type=EngineConfig)
    if cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in cpus})
        torch.set_num_threads(len(cpus))
    context = zmq.Context()
    commands, events = context.socket(zmq.PULL), context.socket(zmq.PUSH)
    events.setsockopt(zmq.SNDHWM, 0)  # a busy HTTP process must never block a step
    commands.connect(commands_address)
    events.connect(events_address)
    try:
        try:
            engine = LLMEngine(
                config,
                progress=lambda stage, fraction: (
                    print(f"loading: {stage} {fraction:.0%}", file=sys.stderr) if fraction in (0.0, 1.0) else None
                ),
            )
        except EngineError as error:
            events.send(protocol.encode(protocol.CoreStartFailed(str(error))))
            return 1
        freeze_loaded_heap()  # no full collection walks the model again while requests run
        core = CoreEndpoint(engine, commands, events, int(parent_pid))
        events.send(protocol.encode(core.ready()))
        core.run()
    except StopSignal:
        pass
    finally:
        commands.close(linger=0)
        events.close(linger=1000)  # the last events (CoreStopped) still reach the HTTP process
        context.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
