"""One traffic profile's requests, drawn only as they are needed: arrival times from its arrival
process (workbench/traffic/arrivals.py), contents from its prompt source
(workbench/traffic/sources.py). Everything is drawn from one seed, so the same seed and settings
give the same schedule, byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np

from engine.errors import ConfigError
from workbench.traffic.arrivals import ARRIVALS
from workbench.traffic.context_fit import fit_to_context
from workbench.traffic.planned_request import PlannedRequest
from workbench.traffic.profile import TrafficProfile
from workbench.traffic.prompts import PromptMaker
from workbench.traffic.sources import PROMPT_SOURCES, SessionPrompts, SourceContext


def arrival_times(
    profile: TrafficProfile, rng: np.random.Generator, rate_changes: Iterable[tuple[float, float]] = ()
) -> Iterator[float]:
    """Open-loop arrival times in seconds, drawn one at a time; `rate_changes` are (time_s, new
    rate) from scenario events."""
    unit_gaps = ARRIVALS[profile.arrival].unit_gaps
    count, now, rate_override = 0, 0.0, None
    changes = sorted(rate_changes)
    limit = profile.num_requests or math.inf
    while count < limit:
        (gap,) = unit_gaps(profile, rng, 1)
        while changes and changes[0][0] <= now:
            rate_override = changes.pop(0)[1]
        rate = rate_override if rate_override is not None else profile.rate_at(now)
        if rate <= 0:  # paused until the next change
            if not changes:
                return
            now = changes[0][0]
            continue
        now += gap / rate
        if profile.duration_s and now > profile.duration_s:
            return
        count += 1
        yield now


class PlannedTraffic:
    """A profile of a billion requests costs nothing until they fall due, and Stop never waits for
    a plan.

    Arrival times and request contents come from two streams of the same seed: reading arrivals
    ahead (or counting those left) never changes a prompt. `arrivals` yields one time per
    open-loop request (closed-loop requests have none: they are sent as slots free, `known_count`
    of them); `next_request` draws the contents of the next one, in the same order."""

    def __init__(
        self,
        profile: TrafficProfile,
        prompt_maker: PromptMaker,
        seed: int | np.random.SeedSequence,
        max_model_len: int,
        rate_changes: Iterable[tuple[float, float]] = (),
    ):
        self.profile = profile
        arrival_rng, content_rng = np.random.default_rng(seed).spawn(2)
        rate_changes = list(rate_changes)
        process = ARRIVALS[profile.arrival]
        source = PROMPT_SOURCES[profile.prompts]
        if not source.recorded and not process.open_loop and not profile.num_requests:
            raise ConfigError("num_requests: closed_loop traffic needs a number of requests")
        self.source = source(SourceContext(profile, prompt_maker, content_rng, max_model_len))
        self.sessions = self.source.sessions
        self.trace_summary = self.source.trace_summary
        if self.source.own_arrivals is not None:
            self.known_count: int | None = len(self.source.own_arrivals)
            self.arrivals: Iterator[float | None] = iter(self.source.own_arrivals)
        elif not process.open_loop:  # no arrival times: sent as slots free, counted by known_count
            self.arrivals = iter(())
            self.known_count = profile.num_requests
        else:
            self.arrivals = arrival_times(profile, arrival_rng, rate_changes)
            # A duration or a rate change can end the traffic before num_requests: then only
            # drawing every arrival tells how many there are.
            limited_by_count = not profile.duration_s and not rate_changes and self.source.counted_by_num_requests
            self.known_count = profile.num_requests if limited_by_count else None

    def next_request(self, arrival_s: float | None) -> PlannedRequest:
        """The contents of the next request, which arrives at `arrival_s`."""
        return self.source.next_request(arrival_s)

    def follow_up(self, session: int, ended_s: float) -> PlannedRequest | None:
        """A session's next turn, arriving a think time after its previous turn ended at `ended_s`
        (seconds after the start); None once the session is over."""
        assert isinstance(self.source, SessionPrompts)
        return self.source.follow_up(session, ended_s)


def injected_request(
    prompt_maker: PromptMaker,
    rng: np.random.Generator,
    prompt_tokens: int,
    output_tokens: int,
    max_model_len: int,
    arrival_s: float | None,
    tag: str,
    traffic: TrafficProfile | None,
) -> PlannedRequest:
    """An injected request: a synthetic prompt and an output length, both fit to the model, sampled
    as the scenario's traffic is (greedy, ignoring end-of-sequence, without one)."""
    fit = fit_to_context(prompt_tokens, output_tokens, max_model_len)
    return PlannedRequest(
        arrival_s,
        tuple(prompt_maker.synthetic(fit.prompt_tokens, rng)),
        (traffic or TrafficProfile()).sampling_params(fit.max_tokens),
        tag,
        "injected",
        clipped=fit.clipped,
    )
