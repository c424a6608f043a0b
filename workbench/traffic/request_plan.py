"""The requests a scenario will send, drawn as they fall due.

Background traffic and injected events are merged in arrival order (at equal times, traffic
first, then events in the order written); requests due at or after a `stop` event are dropped.
Closed-loop requests have no arrival time: they wait apart until a slot frees. A session's next
turn (workbench/traffic/sessions.py) is planned when its previous turn ends (`request_ended`), and waits
with the timed requests until it is due. Nothing is drawn ahead except the next arrival time, so
a plan's memory and set-up time do not grow with its number of requests, and clearing it is
immediate.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass

import numpy as np

from workbench.traffic.arrivals import ARRIVALS
from workbench.traffic.planned_request import PlannedRequest
from workbench.traffic.planned_traffic import PlannedTraffic, injected_request
from workbench.traffic.prompts import PromptMaker
from workbench.traffic.scenario import Scenario, ScenarioEvent


@dataclass
class _Injection:
    """An inject event's requests not yet sent."""

    event: ScenarioEvent
    left: int


class RequestPlan:
    def __init__(self, scenario: Scenario, max_model_len: int, prompt_maker: PromptMaker):
        self._maker, self._max_model_len = prompt_maker, max_model_len
        traffic_seed, inject_seed = np.random.SeedSequence(scenario.seed).spawn(2)
        self._inject_rng = np.random.default_rng(inject_seed)
        self._stop_at = min((event.at_s for event in scenario.events if event.action == "stop"), default=float("inf"))
        self._injections = deque(
            _Injection(event, event.count)
            for event in sorted(scenario.events, key=lambda event: event.at_s)
            if event.action == "inject" and event.at_s < self._stop_at
        )
        self._traffic_profile = scenario.traffic  # how injected requests are sampled too
        self._traffic: PlannedTraffic | None = None
        self._traffic_next: float | None = None  # the next open-loop arrival, drawn ahead
        self._traffic_left: int | None = 0  # open-loop requests not yet sent, when known
        self.closed_loop_left = 0
        self._follow_ups: list[tuple[float, int, PlannedRequest]] = []  # sessions' next turns, by arrival
        self._follow_up_order = itertools.count()  # equal arrival times keep the order they were planned in
        if scenario.traffic is not None:
            rate_changes = [(event.at_s, event.rate) for event in scenario.events if event.action == "set_rate"]
            self._traffic = PlannedTraffic(scenario.traffic, prompt_maker, traffic_seed, max_model_len, rate_changes)
            if not ARRIVALS[scenario.traffic.arrival].open_loop:
                self.closed_loop_left = self._traffic.known_count
            else:
                self._open_loop = itertools.takewhile(lambda arrival: arrival < self._stop_at, self._traffic.arrivals)
                self._traffic_next = next(self._open_loop, None)
                self._traffic_left = None if self._stop_at < float("inf") else self._traffic.known_count
        # How many requests the plan holds, if that is known without drawing every arrival time
        # (traffic that ends by a duration, a rate change or a stop event is not).
        self.total: int | None = self.known_left()

    def known_left(self) -> int | None:
        """How many planned requests are left to send, or None while traffic that ends by a
        duration is still arriving."""
        if self._traffic_left is None:
            return None
        injected = sum(injection.left for injection in self._injections)
        return self._traffic_left + self.closed_loop_left + injected + len(self._follow_ups)

    @property
    def next_arrival_s(self) -> float | None:
        """When the next timed request is due, in seconds after the start; None if none is left."""
        injection = self._injections[0].event.at_s if self._injections else None
        follow_up = self._follow_ups[0][0] if self._follow_ups else None
        due = [time for time in (self._traffic_next, injection, follow_up) if time is not None]
        return min(due) if due else None

    @property
    def has_timed(self) -> bool:
        return self._traffic_next is not None or bool(self._injections) or bool(self._follow_ups)

    @property
    def trace_summary(self) -> dict | None:
        """A replayed trace's file, rows and requests cut to the context, for the run's header."""
        return self._traffic.trace_summary if self._traffic is not None else None

    @property
    def sessions_cut_by_context(self) -> int | None:
        """Sessions ended because their next prompt would not fit the context (None: no sessions)."""
        sessions = self._traffic.sessions if self._traffic is not None else None
        return sessions.cut_by_context if sessions is not None else None

    @property
    def sessions_started(self) -> int | None:
        """Sessions started so far: the n of `sessions_cut_by_context` (None: no sessions)."""
        sessions = self._traffic.sessions if self._traffic is not None else None
        return sessions.started if sessions is not None else None

    def request_ended(self, request: PlannedRequest, ended_s: float, finished: bool) -> None:
        """A sent request ended at `ended_s` (seconds after the start): a session's next turn, if it
        has one, joins the timed requests; a turn that did not finish ends its session."""
        if request.session is None or not finished or ended_s >= self._stop_at:
            return  # its next turn would be due after the stop
        follow_up = self._traffic.follow_up(request.session, ended_s)
        if follow_up is not None and follow_up.arrival_s < self._stop_at:
            heapq.heappush(self._follow_ups, (follow_up.arrival_s, next(self._follow_up_order), follow_up))

    def pop_timed(self) -> PlannedRequest:
        """Draw the next timed request (the caller checked that one is due)."""
        arrival_s = self.next_arrival_s
        if self._follow_ups and arrival_s == self._follow_ups[0][0]:
            return heapq.heappop(self._follow_ups)[2]
        if self._traffic_next is not None and arrival_s == self._traffic_next:
            self._traffic_next = next(self._open_loop, None)
            if self._traffic_left is not None:
                self._traffic_left -= 1
            return self._traffic.next_request(arrival_s)
        injection = self._injections[0]
        injection.left -= 1
        if not injection.left:
            self._injections.popleft()
        return self._injected(injection.event)

    def pop_closed_loop(self) -> PlannedRequest:
        """Draw the next closed-loop request (the caller checked that one is left)."""
        self.closed_loop_left -= 1
        return self._traffic.next_request(None)

    def _injected(self, event: ScenarioEvent) -> PlannedRequest:
        return injected_request(
            self._maker,
            self._inject_rng,
            event.prompt_tokens,
            event.output_tokens,
            self._max_model_len,
            event.at_s,
            event.tag,
            self._traffic_profile,
        )

    def clear(self) -> None:
        """Drop every request not yet sent."""
        self._traffic_next, self._traffic_left, self.closed_loop_left = None, 0, 0
        self._injections.clear()
        self._follow_ups.clear()
        self._stop_at = float("-inf")  # as a stop event now: sessions in flight plan no next turn

    def count_rest(self) -> int:
        """How many requests are left; the plan is empty afterwards. Unless the number is known,
        this draws the remaining open-loop arrival times (not their contents)."""
        count = self.known_left()
        if count is None:
            count = (self._traffic_next is not None) + sum(1 for _ in self._open_loop) + self.closed_loop_left
            count += sum(injection.left for injection in self._injections) + len(self._follow_ups)
        self.clear()
        return count
