"""The arrival processes, one entry each (rates in requests per second):

  poisson      exponential gaps, mean 1/rate
  gamma        gamma gaps with shape = burstiness (vLLM's convention): 1.0 is Poisson, below 1 is
               burstier, above 1 more regular; the coefficient of variation is 1/sqrt(burstiness)
  constant     evenly spaced, 1/rate apart
  ramp         Poisson whose rate moves linearly from `rate` to `end_rate` over `duration_s`
  closed_loop  no arrival times: the runner keeps `concurrency` requests in flight

Gaps are drawn for a unit rate and stretched by the rate in force, so a scenario's `set_rate`
event changes the pace without changing the random draws before it. A new process is an entry in
`ARRIVALS` (docs/extending.md); nothing else compares their names (tests/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.errors import ConfigError


def _exponential(profile, rng: np.random.Generator, count: int) -> np.ndarray:
    return rng.exponential(1.0, count)


def _gamma(profile, rng: np.random.Generator, count: int) -> np.ndarray:
    return rng.gamma(profile.burstiness, 1.0 / profile.burstiness, count)


def _even(profile, rng: np.random.Generator, count: int) -> np.ndarray:
    return np.ones(count)


def _steady_rate(profile, time_s: float) -> float:
    return profile.rate


def _ramp_rate(profile, time_s: float) -> float:
    fraction = min(time_s / profile.duration_s, 1.0)
    return profile.rate + (profile.end_rate - profile.rate) * fraction


def _no_check(profile) -> None:
    return None


def _check_ramp(profile) -> None:
    if profile.end_rate <= 0 or profile.duration_s <= 0:
        raise ConfigError("end_rate, duration_s: a ramp needs a positive end_rate and duration_s")


@dataclass(frozen=True)
class ArrivalProcess:
    name: str
    # Inter-arrival gaps for a rate of 1 request/s; None: closed loop (sent as slots free).
    unit_gaps: Callable[[object, np.random.Generator, int], np.ndarray] | None
    settings: tuple[str, ...]  # the profile's fields it reads (the window shows only those)
    rate_at: Callable[[object, float], float] = field(default=_steady_rate)
    check: Callable[[object], None] = field(default=_no_check)  # ConfigError on settings it cannot use

    @property
    def open_loop(self) -> bool:
        return self.unit_gaps is not None


ARRIVALS: dict[str, ArrivalProcess] = {
    process.name: process
    for process in (
        ArrivalProcess("poisson", _exponential, ("rate",)),
        ArrivalProcess("gamma", _gamma, ("rate", "burstiness")),
        ArrivalProcess("constant", _even, ("rate",)),
        ArrivalProcess("ramp", _exponential, ("rate", "end_rate"), rate_at=_ramp_rate, check=_check_ramp),
        ArrivalProcess("closed_loop", None, ("concurrency",)),
    )
}
