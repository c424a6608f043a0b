"""Run a scenario on an engine: send the planned requests at their arrival times, step the
engine, and hand every step and every ended request to the caller (run log, metrics store).

Arrival times are honoured in the engine's clock: a request's `arrival_time` is when it was due,
even if the loop was busy in a step then, so queueing delay is measured, not hidden.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.llm_engine import LLMEngine
from engine.metrics import RequestMetrics, StepStats
from engine.outputs import RequestOutput
from engine.prompts import PromptMaker
from engine.sampling_params import SamplingParams
from engine.scenario import Scenario
from engine.traffic import PlannedRequest, plan_traffic

_IDLE_POLL_S = 0.005


@dataclass
class EndedRequest:
    request_id: str
    tag: str
    metrics: RequestMetrics


@dataclass
class RunResult:
    start_time: float  # engine clock when the run started
    duration_s: float
    steps: list[StepStats] = field(default_factory=list)
    requests: list[EndedRequest] = field(default_factory=list)
    interrupted: bool = False


def plan_scenario(scenario: Scenario, engine: LLMEngine) -> list[PlannedRequest]:
    """All requests of a scenario, seeded: background traffic plus injected events, by arrival
    (closed-loop requests, with no arrival time, last)."""
    rng = np.random.default_rng(scenario.seed)
    maker = PromptMaker(engine.tokenizer, engine.model_config.vocab_size)
    stops = [event.at_s for event in scenario.events if event.action == "stop"]
    stop_at = min(stops, default=float("inf"))
    planned: list[PlannedRequest] = []
    if scenario.traffic is not None:
        rate_changes = [(event.at_s, event.rate) for event in scenario.events if event.action == "set_rate"]
        planned += plan_traffic(scenario.traffic, maker, rng, engine.max_model_len, rate_changes)
    for event in scenario.events:
        if event.action == "inject":
            for _ in range(event.count):
                prompt = maker.synthetic(min(event.prompt_tokens, engine.max_model_len - 2), rng)
                output = max(1, min(event.output_tokens, engine.max_model_len - len(prompt) - 1))
                planned.append(PlannedRequest(event.at_s, tuple(prompt), output, event.tag))
    planned = [request for request in planned if request.arrival_s is None or request.arrival_s < stop_at]
    return sorted(planned, key=lambda request: (request.arrival_s is None, request.arrival_s or 0.0))


class ScenarioRunner:
    def __init__(
        self,
        engine: LLMEngine,
        scenario: Scenario,
        *,
        on_step: Callable[[StepStats], None] = lambda stats: None,
        on_request_end: Callable[[EndedRequest], None] = lambda ended: None,
        on_output: Callable[[RequestOutput], None] = lambda output: None,
        should_stop: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.engine = engine
        self.scenario = scenario
        self.on_step, self.on_request_end, self.on_output = on_step, on_request_end, on_output
        self.should_stop = should_stop
        self.sleep = sleep
        self.planned = plan_scenario(scenario, engine)
        self._tags: dict[str, str] = {}
        self._closed_loop_in_flight: set[str] = set()

    @property
    def total_requests(self) -> int:
        return len(self.planned)

    def run(self, start_time: float | None = None) -> RunResult:
        """Run to the end of the traffic (or the scenario's max_duration_s, or should_stop).
        start_time: the engine-clock instant arrival times count from (default: now)."""
        engine, traffic = self.engine, self.scenario.traffic
        start = engine.clock() if start_time is None else start_time
        result = RunResult(start_time=start, duration_s=0.0)
        timed = [request for request in self.planned if request.arrival_s is not None]
        closed_loop = [request for request in self.planned if request.arrival_s is None]
        concurrency = traffic.concurrency if traffic is not None else 0
        next_timed = 0
        try:
            while True:
                now = engine.clock()
                if self.should_stop() or self._past_deadline(now - start):
                    result.interrupted = True
                    break
                while next_timed < len(timed) and timed[next_timed].arrival_s <= now - start:
                    self._send(timed[next_timed], start + timed[next_timed].arrival_s)
                    next_timed += 1
                while closed_loop and len(self._closed_loop_in_flight) < concurrency:
                    self._closed_loop_in_flight.add(self._send(closed_loop.pop(0), now))
                if engine.has_unfinished():
                    self._step(result)
                elif next_timed < len(timed):
                    wait = start + timed[next_timed].arrival_s - engine.clock()
                    self.sleep(min(max(wait, 0.0), _IDLE_POLL_S))
                elif not closed_loop:
                    break
        finally:
            result.duration_s = engine.clock() - start
        return result

    def _past_deadline(self, elapsed: float) -> bool:
        return bool(self.scenario.max_duration_s) and elapsed >= self.scenario.max_duration_s

    def _send(self, request: PlannedRequest, arrival_time: float) -> str:
        traffic = self.scenario.traffic
        params = SamplingParams(
            max_tokens=request.max_tokens,
            temperature=traffic.temperature if traffic is not None else 0.0,
            ignore_eos=traffic.ignore_eos if traffic is not None else True,
        )
        request_id = f"{request.tag}-{len(self._tags)}"
        self._tags[request_id] = request.tag
        return self.engine.add_request(list(request.prompt_token_ids), params, arrival_time=arrival_time, request_id=request_id)

    def _step(self, result: RunResult) -> None:
        step = self.engine.step()
        result.steps.append(step.stats)
        self.on_step(step.stats)
        for output in step.outputs:
            self.on_output(output)
            if output.finished:
                self._closed_loop_in_flight.discard(output.request_id)
                ended = EndedRequest(output.request_id, self._tags.get(output.request_id, ""), output.metrics)
                result.requests.append(ended)
                self.on_request_end(ended)
