"""The engine core: one engine and the rules every driver of it keeps (vLLM's EngineCore).

The window's engine thread and headless runs drive it in-process (workbench/backends/local.py),
`workbench serve` in a process of its own behind ZeroMQ (workbench/server/engine_core.py). They
differ in how commands reach it and where its outputs go, never in these rules:

- **Refusals at the door.** `add_request` raises EngineError for anything it could have refused
  (a bad parameter, a token past the vocabulary, an id in use), and, once `end_all` has run,
  for every request: nothing is refused mid-step.
- **Held until warm.** `ready_to_step` is false while the decode graph compiles in the
  background: a step beside the compile takes 5 (median) to 65 (90th percentile) times as long
  as a compiled one (docs/compiled-decode.md, "Warm-up: who waits"). Serve takes requests and
  steps none until warm; a headless run waits before it starts; the window holds a Start's run,
  and runs what a user injects meanwhile, each such step marked `beside_compile` in its stats.
- **A failed step fails its requests, not the engine.** When a step raises, every unfinished
  request ends with finish reason "error" and the step's error as its detail, their blocks are
  freed, and the engine goes on serving (`CoreStep.failure` says what failed). Only when ending
  them fails too is the engine broken (`EngineBroken`): its driver stops using it and says why.
- **Ending at stop.** `end_all` aborts every unfinished request and refuses later ones.

Per `step()`: data in, the requests added and aborted since the last step; state read and
written, the engine's (engine/llm_engine.py); data out, a `CoreStep`; errors, `EngineBroken`.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass

from engine.errors import EngineError
from engine.execution.compile_cache import CompileProgress
from engine.llm_engine import LLMEngine
from engine.requests.outputs import StepResult
from engine.requests.sampling_params import SamplingParams

SHUTTING_DOWN = "the engine is shutting down"


class EngineBroken(EngineError):
    """A step failed, and ending its requests failed too: the engine's state cannot be trusted.
    `request_ids`: the requests unfinished when the step failed, none of them served further."""

    def __init__(self, message: str, request_ids: list[str]):
        super().__init__(message)
        self.request_ids = request_ids


class ShuttingDown(EngineError):
    """A request added after `end_all`: refused, as the engine is stopping."""


@dataclass
class CoreStep:
    result: StepResult
    # The step's error, when it raised: `result.outputs` then holds the ends of the requests it
    # failed (finish reason "error"), and `result.stats` the empty step that delivered them.
    failure: str | None = None


class EngineCore:
    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self.shutting_down = False
        self.failed_steps = 0

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str,
        arrival_time: float | None = None,
        priority: int = 0,
    ) -> str:
        if self.shutting_down:
            raise ShuttingDown(SHUTTING_DOWN)
        return self.engine.add_request(
            prompt, params, arrival_time=arrival_time, priority=priority, request_id=request_id
        )

    def abort(self, request_id: str) -> bool:
        return self.engine.abort(request_id)

    def end_all(self) -> list[str]:
        """Abort every unfinished request (their ends come with the next step) and refuse later
        ones. The ids ended."""
        self.shutting_down = True
        ended = [request_id for request_id in self.unfinished_ids() if self.engine.abort(request_id)]
        return ended

    def unfinished_ids(self) -> list[str]:
        return self.engine.unfinished_ids()

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished()

    def warm_up_progress(self) -> CompileProgress | None:
        """The background compile's progress; None once the engine is warm (or compiles nothing)."""
        return self.engine.executor.compile_progress

    def ready_to_step(self) -> bool:
        """Something to do, and no compile to wait for."""
        return self.engine.has_unfinished() and self.warm_up_progress() is None

    def step(self) -> CoreStep:
        try:
            return CoreStep(self.engine.step())
        except Exception as error:  # noqa: BLE001 - one failed step must not stop the engine
            failure = f"the engine step failed: {type(error).__name__}: {error}"
            print(f"engine core: {failure}\n{traceback.format_exc()}", file=sys.stderr)
        self.failed_steps += 1
        unfinished = self.engine.unfinished_ids()
        try:
            self.engine.fail_unfinished(failure)
            delivered = self.engine.step()  # nothing left to run: it delivers the ends, freeing nothing more
        except Exception as error:  # noqa: BLE001 - the engine is broken: its driver stops it
            message = f"{failure}; ending its requests failed too: {type(error).__name__}: {error}"
            raise EngineBroken(message, unfinished) from error
        return CoreStep(delivered, failure)

    def step_or_raise(self) -> StepResult:
        """One step for a driver that cannot go on past a failed one (a measurement, a replay of a
        published run, the demo): the step's result, or EngineError saying what failed (its
        requests ended with it, as `step` ends them)."""
        step = self.step()
        if step.failure is not None:
            raise EngineError(step.failure)
        return step.result

    def close(self) -> None:
        """Stop the engine's background compile and wait for it (engine/llm_engine.py)."""
        self.engine.close()
