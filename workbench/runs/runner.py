"""Run a scenario on a backend: send the planned requests at their arrival times, advance the
backend, and hand every update and every ended request to the caller (run log, metrics store).

Arrival times are honoured in the backend's clock: a request's `arrival_time` is when it was due,
even if the loop was busy in a step then, so queueing delay is measured, not hidden.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.requests.metrics import FINISHED_REASONS, UNFINISHED, RequestMetrics, StepStats
from engine.requests.outputs import RequestOutput
from workbench.backends.protocol import Backend, BackendUpdate
from workbench.traffic.planned_request import PlannedRequest
from workbench.traffic.planned_traffic import injected_request
from workbench.traffic.prompts import PromptMaker
from workbench.traffic.request_plan import RequestPlan
from workbench.traffic.scenario import Scenario

_IDLE_POLL_S = 0.005
WAITING_STATES = ("waiting", "waiting_long", "preempted")  # RequestProgress.state before (or between) steps


@dataclass
class EndedRequest:
    request_id: str
    tag: str
    metrics: RequestMetrics
    sent_index: int | None = None  # its place in the order of sending: ties in arrival keep it
    planned: dict | None = None  # what was asked for (PlannedRequest.record), for the run log


@dataclass
class RunResult:
    start_time: float  # backend clock when the run started
    duration_s: float
    steps: list[StepStats] = field(default_factory=list)
    # Every request sent: ended ones, then those still in flight when the run stopped (finish
    # reason "unfinished"), so that no request that arrived is missing from the run's figures.
    requests: list[EndedRequest] = field(default_factory=list)
    interrupted: bool = False
    num_unfinished: int = 0  # sent, still waiting or running at the end
    num_not_sent: int = 0  # planned, but the run stopped before they were due
    # The backend's, outside any one request, and each failed step's error (its requests ended with it).
    problems: list[str] = field(default_factory=list)
    sessions_cut_by_context: int | None = None  # sessions traffic: ended early, their next prompt too long
    sessions_started: int | None = None  # sessions traffic: its n


class ScenarioRunner:
    """Drives one backend with one scenario's traffic. `run()` goes to the end; the GUI's worker
    instead calls `tick()` between its own commands, and may `inject`, `pause` or `stop_traffic`.
    `scenario` may be None: then only injected requests arrive."""

    def __init__(
        self,
        backend: Backend,
        scenario: Scenario | None,
        *,
        on_step: Callable[[BackendUpdate], None] = lambda update: None,
        on_request_end: Callable[[EndedRequest], None] = lambda ended: None,
        on_output: Callable[[RequestOutput], None] = lambda output: None,
        on_send: Callable[[str, list[int]], None] = lambda request_id, prompt_token_ids: None,
        should_stop: Callable[[], bool] = lambda: False,
    ):
        self.backend = backend
        self.on_step, self.on_request_end, self.on_output, self.on_send = on_step, on_request_end, on_output, on_send
        self.should_stop = should_stop
        self.tags: dict[str, str] = {}  # request id -> tag, for every request sent
        self.sent_index: dict[str, int] = {}  # request id -> its place in the order of sending
        # Sent and not ended, in order of sending: each with its plan's record (PlannedRequest.record).
        self._in_flight: dict[str, dict] = {}
        self.result = RunResult(start_time=backend.clock(), duration_s=0.0)
        self._closed_loop_in_flight: set[str] = set()
        self._session_turns: dict[str, PlannedRequest] = {}  # request id -> the session turn it is
        # Requests of an earlier run (in this runner) recorded there as unfinished, whose aborts the
        # backend had not honoured when that run ended: their late ends belong to no run.
        self._left_behind: set[str] = set()
        self._prompt_maker = PromptMaker(backend.tokenizer, backend.vocab_size)
        self._inject_rng = np.random.default_rng(scenario.seed if scenario else 0)
        self.load_traffic(scenario)

    def load_traffic(self, scenario: Scenario | None) -> None:
        """Replace the planned traffic (requests in flight carry on); arrivals count from now."""
        self.scenario = scenario
        self.plan = (
            RequestPlan(scenario, self.backend.max_model_len, self._prompt_maker) if scenario is not None else None
        )
        self._paused_since = None
        self.result = RunResult(start_time=self.backend.clock(), duration_s=0.0)  # each run its own
        self._run_closed = False
        # Each run numbers its requests from 0 ("conv-0", not "conv-977" in the window's second run).
        self._sent_in_run = 0

    @property
    def total_requests(self) -> int | None:
        """How many requests the traffic will send; None while only drawing them all would tell."""
        return self.plan.total if self.plan is not None else 0

    @property
    def start_time(self) -> float:
        return self.result.start_time

    @property
    def traffic_pending(self) -> bool:
        return self.plan is not None and (self.plan.has_timed or self.plan.closed_loop_left > 0)

    def run(self, start_time: float | None = None) -> RunResult:
        """Run to the end of the traffic (or the scenario's max_duration_s, or should_stop).
        start_time: the backend-clock instant arrival times count from (default: now)."""
        self.start(start_time)
        try:
            while self.tick():
                pass
        finally:
            self.close_run("when the run ended")
        return self.result

    def close_run(self, when: str) -> RunResult:
        """The run's closing account, once: its duration on the backend clock, the requests it
        ends without (those in flight recorded as "unfinished" with what they had so far, `when`
        in their detail; those never sent counted), the backend's problems and the sessions'
        counts. A later call returns the same result; the next run (`load_traffic`) opens anew."""
        if self._run_closed:
            return self.result
        self._run_closed = True
        self.result.duration_s = self.backend.clock() - self.start_time
        self.stop_traffic()
        rest = self.in_flight_now(when)
        self.result.num_unfinished = sum(ended.metrics.finish_reason == UNFINISHED for ended in rest)
        self.result.interrupted |= bool(rest)
        for ended in rest:
            self._record_end(ended)
        self.result.problems += self.backend.problems()
        self.result.sessions_cut_by_context = self.plan.sessions_cut_by_context if self.plan else None
        self.result.sessions_started = self.plan.sessions_started if self.plan else None
        return self.result

    def in_flight_now(self, when: str) -> list[EndedRequest]:
        """The requests sent whose end has not been recorded, as copies: "unfinished" with what they
        have so far (`when` goes into their detail), or, for one that ended since the last update
        (an abort), that end; the run goes on untouched."""
        unfinished = []
        for request_id in self._in_flight:
            progress = self.backend.progress(request_id)
            if progress is None:  # ended inside a step that was interrupted before it returned
                continue
            ended = progress.metrics.finish_reason
            metrics = dataclasses.replace(
                progress.metrics,
                token_times=list(progress.metrics.token_times),
                finish_reason=ended or UNFINISHED,
                finish_detail=progress.metrics.finish_detail if ended else f"{progress.state} {when}",
            )
            unfinished.append(self._ended(request_id, metrics))
        return unfinished

    def not_sent_yet(self) -> int | None:
        """Planned requests not sent so far; None while traffic that ends by a duration arrives."""
        return self.plan.known_left() if self.plan is not None else 0

    def start(self, start_time: float | None = None) -> None:
        self.result.start_time = self.backend.clock() if start_time is None else start_time

    def tick(self) -> bool:
        """Send what is due, then one backend update (or a short idle wait). False once finished."""
        backend = self.backend
        now = backend.clock()
        if self.should_stop() or self._past_deadline(now - self.start_time):
            self.result.interrupted = True
            return False
        paused = self._paused_since is not None
        if not paused:
            self._send_due(now)
        if backend.has_unfinished():
            self._step()
            return True
        if paused:
            backend.sleep(_IDLE_POLL_S)
            return self.traffic_pending
        if self.plan is not None and self.plan.has_timed:
            # Waiting polls (the window's commands, a stop) in short waits; a clock on which
            # waiting costs nothing jumps to the next arrival, however far: polling through an
            # hour of a trace's quiet costs hundreds of thousands of polls.
            wait = max(self._next_due_time() - backend.clock(), 0.0)
            backend.sleep(wait if backend.idle_wait_is_free else min(wait, _IDLE_POLL_S))
            return True
        return self.traffic_pending

    def _next_due_time(self) -> float:
        """When the next timed request is due, on the backend clock. Idle waits sleep until exactly
        this sum and `_send_due` compares against the same sum: comparing the arrival time with
        `now - start` instead can stay false by one rounding step forever (a simulated clock then
        sleeps 1e-17 s at a time, and no traffic arrives)."""
        return self.start_time + self.plan.next_arrival_s

    def _send_due(self, now: float) -> None:
        plan = self.plan
        if plan is None:
            return
        while plan.has_timed and (due := self._next_due_time()) <= now:
            self._send(plan.pop_timed(), due)
        concurrency = self.scenario.traffic.concurrency if self.scenario.traffic else 0
        while plan.closed_loop_left > 0 and len(self._closed_loop_in_flight) < concurrency:
            self._closed_loop_in_flight.add(self._send(plan.pop_closed_loop(), now))

    def inject(self, count: int, prompt_tokens: int, output_tokens: int, tag: str) -> list[str]:
        """Send `count` synthetic requests now (prompts of real text, lengths clipped to the model)."""
        now = self.backend.clock()
        return [
            self._send(
                injected_request(
                    self._prompt_maker,
                    self._inject_rng,
                    prompt_tokens,
                    output_tokens,
                    self.backend.max_model_len,
                    None,
                    tag,
                    self.scenario.traffic if self.scenario else None,
                ),
                now,
            )
            for _ in range(count)
        ]

    def pause(self) -> None:
        if self._paused_since is None:
            self._paused_since = self.backend.clock()

    def resume(self) -> None:
        """Shift the remaining arrivals by the pause, so the traffic picks up where it left."""
        if self._paused_since is not None:
            self.result.start_time += self.backend.clock() - self._paused_since
            self._paused_since = None

    def stop_traffic(self) -> None:
        """Send nothing more; requests in flight run to completion. The requests the plan still
        held count as never sent, and the run as stopped early if there were any."""
        if self.plan is not None and (never_sent := self.plan.count_rest()):
            self.result.num_not_sent += never_sent
            self.result.interrupted = True

    @property
    def num_in_flight(self) -> int:
        """Requests sent and not ended."""
        return len(self._in_flight)

    def abort_waiting(self) -> int:
        """Abort the requests sent that wait for their first step (or, preempted, for the next):
        they end, reason "abort", in the next update. How many."""
        waiting = [
            request_id
            for request_id in self._in_flight
            if (progress := self.backend.progress(request_id)) is not None and progress.state in WAITING_STATES
        ]
        for request_id in waiting:
            self.backend.abort(request_id)
        self.result.interrupted |= bool(waiting)
        return len(waiting)

    def end_in_flight(self, timeout_s: float = 10.0) -> int:
        """Abort every request in flight and advance until their ends are recorded (the caller's
        callbacks see them, as this run's), sending nothing new. A request the backend has not
        ended by the deadline (a server that never hears the abort) is recorded now, as
        unfinished, and whatever it sends later is dropped: it must not end inside the next run,
        or feed the next run's sessions. How many were aborted."""
        self.stop_traffic()
        aborted = list(self._in_flight)
        for request_id in aborted:
            self.backend.abort(request_id)
        self.result.interrupted |= bool(aborted)
        deadline = self.backend.clock() + timeout_s
        while self._in_flight and self.backend.has_unfinished() and self.backend.clock() < deadline:
            self._step()
        for ended in self.in_flight_now(f"{timeout_s:g} s after its abort, when its run ended"):
            self._record_end(ended)
            self._left_behind.add(ended.request_id)
        return len(aborted)

    def _past_deadline(self, elapsed: float) -> bool:
        return bool(self.scenario and self.scenario.max_duration_s) and elapsed >= self.scenario.max_duration_s

    def _new_request_id(self, tag: str) -> str:
        """TAG-N, N counting this run's requests; never the id of a request the backend may still
        hold (one left behind by an earlier run, whose late outputs are dropped by id)."""
        while True:
            request_id = f"{tag}-{self._sent_in_run}"
            self._sent_in_run += 1
            if request_id not in self._left_behind and request_id not in self._in_flight:
                return request_id

    def _send(self, request: PlannedRequest, arrival_time: float) -> str:
        request_id = self._new_request_id(request.tag)
        self.tags[request_id] = request.tag
        self.sent_index[request_id] = self._sent_in_run - 1
        self._in_flight[request_id] = request.record()
        prompt = list(request.prompt_token_ids)
        self.backend.submit(
            prompt, request.params, arrival_time=arrival_time, request_id=request_id, messages=request.messages
        )
        if request.session is not None:
            self._session_turns[request_id] = request
        self.on_send(request_id, prompt)
        return request_id

    def _ended(self, request_id: str, metrics: RequestMetrics) -> EndedRequest:
        return EndedRequest(
            request_id,
            self.tags.get(request_id, ""),
            metrics,
            self.sent_index.get(request_id),
            self._in_flight.get(request_id),
        )

    def _step(self) -> None:
        timed = self.plan is not None and self.plan.has_timed and self._paused_since is None
        update = self.backend.advance(self._next_due_time() if timed else None)
        if update.stats is not None:
            self.result.steps.append(update.stats)
        if update.failure is not None:
            self.result.problems.append(update.failure)
        self.on_step(update)
        for output in update.outputs:
            if output.request_id in self._left_behind:
                if output.finished:
                    self._left_behind.discard(output.request_id)
                continue
            self.on_output(output)
            if output.finished:
                self._closed_loop_in_flight.discard(output.request_id)
                self._record_end(self._ended(output.request_id, output.metrics))

    def _record_end(self, ended: EndedRequest) -> None:
        self._in_flight.pop(ended.request_id, None)
        turn = self._session_turns.pop(ended.request_id, None)
        if turn is not None and self.plan is not None:
            finish = ended.metrics.finish_time
            ended_s = (finish if finish is not None else self.backend.clock()) - self.start_time
            self.plan.request_ended(turn, ended_s, ended.metrics.finish_reason in FINISHED_REASONS)
        self.result.requests.append(ended)
        self.on_request_end(ended)
