"""Synthetic traffic: when requests arrive, how long their prompts and outputs are, and what text
they carry. Everything is drawn from one seeded generator, so the same seed and settings give the
same schedule, byte for byte.

Arrival processes (rates in requests per second):
  poisson      exponential gaps, mean 1/rate
  gamma        gamma gaps with shape = burstiness (vLLM's convention): 1.0 is Poisson, below 1 is
               burstier, above 1 more regular; the coefficient of variation is 1/sqrt(burstiness)
  constant     evenly spaced, 1/rate apart
  ramp         Poisson whose rate moves linearly from `rate` to `end_rate` over `duration_s`
  closed_loop  no arrival times: the runner keeps `concurrency` requests in flight
Gaps are drawn for a unit rate and stretched by the rate in force, so a scenario's `set_rate`
event changes the pace without changing the random draws before it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.errors import ConfigError
from engine.sampling_params import SamplingParams
from engine.settings import check_finite
from workbench.backends.protocol import Chat
from workbench.traffic.context_fit import fit_to_context, prompt_room
from workbench.traffic.prompts import PromptMaker
from workbench.traffic.request_trace import TraceRow, TraceWindow, read_trace_rows, select_rows
from workbench.traffic.sessions import Sessions, Turn

ARRIVAL_KINDS = ("poisson", "gamma", "constant", "ramp", "closed_loop")
LENGTH_KINDS = ("fixed", "uniform", "normal", "lognormal")
PROMPT_SOURCES = ("synthetic", "sharegpt", "trace", "sessions")


@dataclass
class LengthDistribution:
    kind: str = "fixed"
    mean: float = 128.0  # the fixed value, or the mean of normal / lognormal
    std: float = 0.0  # normal: standard deviation; lognormal: sigma of the underlying normal
    low: int = 1  # uniform range [low, high]; every kind is clipped to at least `low`
    high: int = 0  # 0 = up to the model's limit

    def __post_init__(self) -> None:
        check_finite(self)
        if self.kind not in LENGTH_KINDS:
            raise ConfigError(f"kind: expected one of {', '.join(LENGTH_KINDS)}, got {self.kind!r}")
        if self.mean < 1 or self.std < 0 or self.low < 1 or (self.high and self.high < self.low):
            raise ConfigError(
                f"expected mean >= 1, std >= 0, low >= 1 and high 0 or >= low; got mean={self.mean}, "
                f"std={self.std}, low={self.low}, high={self.high}"
            )
        if self.kind == "uniform" and not self.high:
            raise ConfigError("high: a uniform length needs an upper bound")

    def sample(self, rng: np.random.Generator, limit: int) -> int:
        """One length within [low, high]; a uniform range ends at `limit` too, so that its draws stay
        within what the model can take. What the context then leaves is fit_to_context's to say
        (workbench/traffic/context_fit.py), and the run log keeps whether it cut the length."""
        if self.kind == "fixed":
            value = self.mean
        elif self.kind == "uniform":
            value = rng.integers(self.low, min(self.high, limit) + 1)
        elif self.kind == "normal":
            value = rng.normal(self.mean, self.std)
        else:  # lognormal with the requested mean: mu = ln(mean) - sigma^2 / 2
            value = rng.lognormal(math.log(self.mean) - self.std**2 / 2, self.std)
        length = max(round(value), self.low)
        return int(min(length, self.high) if self.high else length)


@dataclass
class TrafficProfile:
    arrival: str = "poisson"
    rate: float = 2.0  # requests/s (the starting rate of a ramp)
    end_rate: float = 0.0  # ramp only
    burstiness: float = 1.0  # gamma only
    concurrency: int = 8  # closed_loop only
    num_requests: int = 100  # stop issuing after this many (0 = no limit: duration_s decides)
    duration_s: float = 0.0  # stop issuing after this long (0 = no limit: num_requests decides)
    prompts: str = "synthetic"  # synthetic | sharegpt | trace | sessions (workbench/traffic/sessions.py)
    prompt_len: LengthDistribution = field(default_factory=lambda: LengthDistribution(mean=128))
    output_len: LengthDistribution = field(
        default_factory=lambda: LengthDistribution(mean=64)
    )  # sharegpt: its low and high clip the reference reply's length
    # trace: CSV or JSONL, one request a row (workbench/traffic/request_trace.py); relative to a preset's folder
    trace_file: str = ""
    trace_start_s: float = 0.0  # trace: replay from this arrival time on (trace seconds)
    time_scale: float = 1.0  # trace: arrival times are multiplied by this (0.5 = twice as fast)
    think_time_s: float = 5.0  # sessions: mean seconds from a turn's last token to the next turn (exponential)
    turns: int = 4  # sessions: at most this many turns each (a ShareGPT conversation may have fewer)
    shared_prefix_tokens: int = 0  # a common "system prompt" before every synthetic prompt
    temperature: float = 0.0
    ignore_eos: bool = True  # fixed output lengths make runs comparable
    tag: str = "chat"  # label of these requests in reports

    def __post_init__(self) -> None:
        check_finite(self)
        if self.arrival not in ARRIVAL_KINDS:
            raise ConfigError(f"arrival: expected one of {', '.join(ARRIVAL_KINDS)}, got {self.arrival!r}")
        if self.prompts not in PROMPT_SOURCES:
            raise ConfigError(f"prompts: expected one of {', '.join(PROMPT_SOURCES)}, got {self.prompts!r}")
        if self.rate <= 0 and self.arrival != "closed_loop":
            raise ConfigError(f"rate: expected a positive number of requests/s, got {self.rate}")
        if self.arrival == "ramp" and (self.end_rate <= 0 or self.duration_s <= 0):
            raise ConfigError("end_rate, duration_s: a ramp needs a positive end_rate and duration_s")
        if self.burstiness <= 0:
            raise ConfigError(f"burstiness: expected > 0, got {self.burstiness}")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency: expected at least 1, got {self.concurrency}")
        if self.num_requests < 0 or self.duration_s < 0 or self.shared_prefix_tokens < 0:
            raise ConfigError("num_requests, duration_s, shared_prefix_tokens: expected values >= 0")
        if self.num_requests == 0 and self.duration_s == 0 and self.prompts != "trace":
            raise ConfigError("num_requests, duration_s: set at least one, or the traffic never ends")
        if self.prompts == "trace" and not self.trace_file:
            raise ConfigError("trace_file: prompts = 'trace' needs a trace file")
        if self.prompts == "sessions" and self.arrival == "closed_loop":
            raise ConfigError("arrival: sessions start by an arrival process (poisson, gamma, ...), not closed_loop")
        if self.turns < 1 or self.think_time_s < 0:
            raise ConfigError(
                f"turns, think_time_s: expected turns >= 1 and think_time_s >= 0, got {self.turns} and "
                f"{self.think_time_s}"
            )
        if self.time_scale <= 0 or self.trace_start_s < 0:
            raise ConfigError(
                f"time_scale, trace_start_s: expected time_scale > 0 and trace_start_s >= 0, got "
                f"{self.time_scale} and {self.trace_start_s}"
            )

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        """How each of this traffic's requests is sampled, `max_tokens` its own."""
        return SamplingParams(max_tokens=max_tokens, temperature=self.temperature, ignore_eos=self.ignore_eos)

    def rate_at(self, time_s: float) -> float:
        if self.arrival == "ramp":
            fraction = min(time_s / self.duration_s, 1.0)
            return self.rate + (self.end_rate - self.rate) * fraction
        return self.rate


@dataclass(frozen=True)
class PlannedRequest:
    """A request as the traffic means it: what the run log keeps beside its outcome (`record`), so
    a report can say "asked for N, got M" and a replay can send it again as it was planned."""

    arrival_s: float | None  # seconds after the run starts; None = closed loop (sent when a slot frees)
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams  # built once, here; the runner sends them as they are
    tag: str
    source: str  # a traffic source (PROMPT_SOURCES) or "injected"
    messages: Chat | None = None  # the chat the prompt was templated from (ShareGPT prompts on a chat model)
    session: int | None = None  # sessions: which one it is a turn of (its next turn follows its end)
    clipped: bool = False  # fit_to_context cut its prompt or output to the model's context

    @property
    def max_tokens(self) -> int:
        return self.params.max_tokens

    def record(self) -> dict:
        """The run log's `planned` entry of this request's line."""
        return {
            "prompt_tokens": len(self.prompt_token_ids),
            "max_tokens": self.params.max_tokens,
            "source": self.source,
            "session": self.session,
            "clipped": self.clipped,
        }


def unit_gaps(profile: TrafficProfile, rng: np.random.Generator, count: int) -> np.ndarray:
    """Inter-arrival gaps for a rate of 1 request/s."""
    if profile.arrival == "constant":
        return np.ones(count)
    if profile.arrival == "gamma":
        return rng.gamma(profile.burstiness, 1.0 / profile.burstiness, count)
    return rng.exponential(1.0, count)  # poisson and ramp


def arrival_times(
    profile: TrafficProfile, rng: np.random.Generator, rate_changes: Iterable[tuple[float, float]] = ()
) -> Iterator[float]:
    """Open-loop arrival times in seconds, drawn one at a time; `rate_changes` are (time_s, new
    rate) from scenario events."""
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
    """One traffic profile's requests, drawn only as they are needed, so that a profile of a
    billion requests costs nothing until they fall due and Stop never waits for a plan.

    Arrival times and request contents come from two streams of the same seed: reading arrivals
    ahead (or counting those left) never changes a prompt, and the same seed gives the same
    requests, byte for byte. `arrivals` yields one time per open-loop request (closed-loop
    requests have none: they are sent as slots free, `known_count` of them); `next_request` draws
    the contents of the next one, in the same order."""

    def __init__(
        self,
        profile: TrafficProfile,
        prompt_maker: PromptMaker,
        seed: int | np.random.SeedSequence,
        max_model_len: int,
        rate_changes: Iterable[tuple[float, float]] = (),
    ):
        self.profile, self._maker, self._max_model_len = profile, prompt_maker, max_model_len
        arrival_rng, self._rng = np.random.default_rng(seed).spawn(2)
        self._rate_changes = list(rate_changes)
        self._prefix: list[int] = []
        self.trace_summary: dict | None = None  # a trace's file, rows and clipped count, for the run's header
        self.sessions = (
            Sessions(profile, prompt_maker, self._rng, max_model_len) if profile.prompts == "sessions" else None
        )
        if profile.prompts == "trace":
            trace = self._read_trace()
            self._trace = iter(trace)
            self.known_count: int | None = len(trace)
            self.arrivals: Iterator[float | None] = iter([row.arrival_s for row, _ in trace])
            return
        if profile.prompts == "synthetic" and profile.shared_prefix_tokens > max_model_len - 3:
            raise ConfigError(
                f"shared_prefix_tokens: {profile.shared_prefix_tokens} leaves no room for a prompt and an output "
                "within "
                f"max_model_len ({max_model_len} tokens); expected at most {max_model_len - 3}"
            )
        if profile.arrival == "closed_loop" and not profile.num_requests:
            raise ConfigError("num_requests: closed_loop traffic needs a number of requests")
        if profile.shared_prefix_tokens and profile.prompts == "synthetic":
            self._prefix = prompt_maker.synthetic(profile.shared_prefix_tokens, self._rng)
        if profile.arrival == "closed_loop":  # no arrival times: sent as slots free, counted by known_count
            self.arrivals = iter(())
            self.known_count = profile.num_requests
        else:
            self.arrivals = arrival_times(profile, arrival_rng, self._rate_changes)
            # A duration or a rate change can end the traffic before num_requests: then only
            # drawing every arrival tells how many there are.
            # Sessions' later turns follow their earlier ones' ends: only the run tells how many.
            limited_by_count = not profile.duration_s and not self._rate_changes and self.sessions is None
            self.known_count = profile.num_requests if limited_by_count else None

    def _read_trace(self) -> list[tuple[TraceRow, list[int] | None]]:
        """The trace's rows this run replays, each with its text prompt's tokens (None for a
        length); counts the requests whose lengths must be cut to the model's context."""
        profile, path = self.profile, Path(self.profile.trace_file)
        window = TraceWindow(profile.trace_start_s, profile.time_scale, profile.duration_s, profile.num_requests)
        rows = read_trace_rows(path)
        chosen = []
        for row in select_rows(rows, window, str(path)):
            prompt_ids = None
            if row.prompt_text is not None:
                if self._maker.tokenizer is None:
                    raise ConfigError(f"{path}:{row.line}: a text prompt needs a model with a tokenizer")
                prompt_ids = self._maker.tokenizer.encode(row.prompt_text)
                if not prompt_ids:
                    raise ConfigError(f"{path}:{row.line}: column 'prompt': the text has no tokens")
            chosen.append((row, prompt_ids))
        clipped = sum(
            fit_to_context(len(ids or ()) or row.prompt_tokens, row.output_tokens, self._max_model_len).clipped
            for row, ids in chosen
        )
        self.trace_summary = {
            "file": str(path),
            "rows_in_file": len(rows),
            "requests": len(chosen),
            "clipped": clipped,
            "max_model_len": self._max_model_len,
        }
        return chosen

    def next_request(self, arrival_s: float | None) -> PlannedRequest:
        """The contents of the next request, which arrives at `arrival_s`."""
        profile, limit = self.profile, self._max_model_len
        if profile.prompts == "trace":
            row, prompt_ids = next(self._trace)
            fit = fit_to_context(len(prompt_ids or ()) or row.prompt_tokens, row.output_tokens, limit)
            prompt = (
                prompt_ids[: fit.prompt_tokens] if prompt_ids else self._maker.synthetic(fit.prompt_tokens, self._rng)
            )
            return self._request(arrival_s, prompt, fit.max_tokens, fit.clipped, tag=row.tag or profile.tag)
        if self.sessions is not None:
            return self._session_request(self.sessions.start(), arrival_s)
        if profile.prompts == "sharegpt":
            prompt, reply_len, messages = self._maker.sharegpt(self._rng)
            # The reference reply's length within output_len's [low, high], then the model's context.
            reply_len = min(max(reply_len, profile.output_len.low), profile.output_len.high or reply_len)
            fit = fit_to_context(len(prompt), reply_len, limit)
            if fit.prompt_tokens < len(prompt):  # cut to fit: the chat no longer says what the prompt holds
                prompt, messages = prompt[: fit.prompt_tokens], None
            return self._request(arrival_s, prompt, fit.max_tokens, fit.clipped, messages=messages)
        drawn_prompt = len(self._prefix) + profile.prompt_len.sample(self._rng, prompt_room(limit) - len(self._prefix))
        prompt_len = fit_to_context(drawn_prompt, 1, limit).prompt_tokens
        prompt = self._prefix + self._maker.synthetic(prompt_len - len(self._prefix), self._rng)
        fit = fit_to_context(drawn_prompt, profile.output_len.sample(self._rng, limit - prompt_len - 1), limit)
        return self._request(arrival_s, prompt, fit.max_tokens, fit.clipped)

    def _request(
        self,
        arrival_s: float | None,
        prompt: list[int],
        max_tokens: int,
        clipped: bool,
        *,
        tag: str = "",
        messages: Chat | None = None,
        session: int | None = None,
    ) -> PlannedRequest:
        profile = self.profile
        return PlannedRequest(
            arrival_s,
            tuple(prompt),
            profile.sampling_params(max_tokens),
            tag or profile.tag,
            profile.prompts,
            messages,
            session,
            clipped,
        )

    def follow_up(self, session: int, ended_s: float) -> PlannedRequest | None:
        """A session's next turn, arriving a think time after its previous turn ended at `ended_s`
        (seconds after the start); None once the session is over."""
        turn = self.sessions.next_turn(session)
        return None if turn is None else self._session_request(turn, ended_s + self.sessions.think_time(session))

    def _session_request(self, turn: Turn, arrival_s: float | None) -> PlannedRequest:
        return self._request(
            arrival_s,
            list(turn.prompt_token_ids),
            turn.max_tokens,
            turn.clipped,
            messages=turn.messages,
            session=turn.session,
        )


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
