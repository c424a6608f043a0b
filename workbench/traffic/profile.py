"""A traffic profile: which arrival process (workbench/traffic/arrivals.py) and which prompt source
(workbench/traffic/sources.py), with their settings, and how lengths are drawn. The requests it
plans come from PlannedTraffic (workbench/traffic/planned_traffic.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.errors import ConfigError
from engine.requests.sampling_params import SamplingParams
from engine.settings import check_finite
from workbench.traffic.arrivals import ARRIVALS
from workbench.traffic.sources import PROMPT_SOURCES

LENGTH_KINDS = ("fixed", "uniform", "normal", "lognormal")


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
    prompts: str = "synthetic"  # synthetic | sharegpt | copying | trace | sessions (workbench/traffic/sources.py)
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
        if self.arrival not in ARRIVALS:
            raise ConfigError(f"arrival: expected one of {', '.join(ARRIVALS)}, got {self.arrival!r}")
        if self.prompts not in PROMPT_SOURCES:
            raise ConfigError(f"prompts: expected one of {', '.join(PROMPT_SOURCES)}, got {self.prompts!r}")
        if self.rate <= 0 and ARRIVALS[self.arrival].open_loop:
            raise ConfigError(f"rate: expected a positive number of requests/s, got {self.rate}")
        ARRIVALS[self.arrival].check(self)
        if self.burstiness <= 0:
            raise ConfigError(f"burstiness: expected > 0, got {self.burstiness}")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency: expected at least 1, got {self.concurrency}")
        if self.num_requests < 0 or self.duration_s < 0 or self.shared_prefix_tokens < 0:
            raise ConfigError("num_requests, duration_s, shared_prefix_tokens: expected values >= 0")
        if self.num_requests == 0 and self.duration_s == 0 and not PROMPT_SOURCES[self.prompts].recorded:
            raise ConfigError("num_requests, duration_s: set at least one, or the traffic never ends")
        PROMPT_SOURCES[self.prompts].check(self)
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
        return ARRIVALS[self.arrival].rate_at(self, time_s)
