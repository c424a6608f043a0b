"""95% intervals for the figures a run reports, and for a change between two configurations.

Within one run, a latency percentile's interval comes from a bootstrap over its requests
(scipy.stats.bootstrap, percentile method, `RESAMPLES` resamples from `SEED`), a share of
requests' (goodput) from Wilson's score interval; each carries its standard error, so that a
single pair of runs can still give an interval for the change between them (the delta method:
`change_from_errors`). That interval covers the request-to-request noise within each run only,
not the drift of the machine between runs: only repeats do (`repeats_interval` over the paired
changes, one per repeat: Student's t).

Every interval names its method, its level and its n, so that a reader can redo it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95
EXACT = "deterministic"  # the method of a figure without noise (Interval.exact)
RESAMPLES = 1000
SEED = 0
# The z of a two-sided interval at LEVEL (1.96 at 95%).
_Z = float(stats.norm.ppf(0.5 + LEVEL / 2))


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    standard_error: float
    method: str

    def as_dict(self) -> dict:
        return {"low": self.low, "high": self.high, "standard_error": self.standard_error, "method": self.method}

    @classmethod
    def from_dict(cls, entry: dict | None) -> Interval | None:
        if not isinstance(entry, dict) or not {"low", "high", "standard_error", "method"} <= set(entry):
            return None
        return cls(entry["low"], entry["high"], entry["standard_error"], entry["method"])

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @classmethod
    def exact(cls, value: float, why: str) -> Interval:
        """The zero-width interval of a figure no run-to-run noise moves (a quality score on fixed
        text, the bytes of the weights): `why` says what fixes it."""
        return cls(value, value, 0.0, f"{EXACT}: {why}")

    @property
    def is_exact(self) -> bool:
        return self.method.startswith(EXACT)


def percentile_interval(values: list[float], q: float) -> Interval | None:
    """The bootstrap interval of the q-th percentile (linear interpolation, as engine.metrics
    computes it) of one value per request; None under two values."""
    data = np.asarray(values, dtype=np.float64)
    if data.size < 2:
        return None
    if np.all(data == data[0]):  # every resample gives the same value; scipy warns on it
        return Interval(float(data[0]), float(data[0]), 0.0, _bootstrap_method(data.size))
    result = stats.bootstrap(
        (data,),
        lambda sample, axis: np.percentile(sample, q, axis=axis),
        n_resamples=RESAMPLES,
        confidence_level=LEVEL,
        method="percentile",
        rng=np.random.default_rng(SEED),
        batch=max(1, 4_000_000 // data.size),  # bounds the memory of a long run's resamples
    )
    low, high = result.confidence_interval
    return Interval(float(low), float(high), float(result.standard_error), _bootstrap_method(data.size))


def mean_interval(values: list[float]) -> Interval | None:
    """The bootstrap interval of the mean of one value per request; None under two values."""
    data = np.asarray(values, dtype=np.float64)
    if data.size < 2:
        return None
    error = float(data.std(ddof=1) / math.sqrt(data.size))
    mean = float(data.mean())
    # With as many requests as a run has, the mean's sampling distribution is close to normal.
    return Interval(mean - _Z * error, mean + _Z * error, error, f"normal, standard error of the mean, n={data.size}")


def share_interval(hits: int, total: int) -> Interval | None:
    """Wilson's score interval of a share of requests, in percent; None without requests."""
    if total == 0:
        return None
    low, high = stats.binomtest(hits, total).proportion_ci(confidence_level=LEVEL, method="wilson")
    share = hits / total
    error = math.sqrt(share * (1 - share) / total)
    return Interval(float(100 * low), float(100 * high), 100 * error, f"Wilson score, n={total}")


def repeats_interval(values: list[float], what: str = "runs") -> Interval | None:
    """The t interval of the mean of one value per run (or per paired repeat: `what`); None
    under two."""
    data = np.asarray(values, dtype=np.float64)
    if data.size < 2:
        return None
    error = float(data.std(ddof=1) / math.sqrt(data.size))
    spread = float(stats.t.ppf(0.5 + LEVEL / 2, data.size - 1)) * error
    mean = float(data.mean())
    return Interval(mean - spread, mean + spread, error, f"Student's t over {data.size} {what}")


def change_from_errors(
    baseline: float, candidate: float, baseline_error: float, candidate_error: float, relative: bool
) -> Interval:
    """The interval of candidate - baseline (or of candidate / baseline - 1) from each run's
    standard error (delta method, normal): one pair of runs, so request-to-request noise only."""
    if relative:
        ratio = candidate / baseline
        error = abs(ratio) * math.sqrt(
            (candidate_error / candidate if candidate else 0.0) ** 2 + (baseline_error / baseline) ** 2
        )
        change = ratio - 1
    else:
        error = math.sqrt(baseline_error**2 + candidate_error**2)
        change = candidate - baseline
    return Interval(
        change - _Z * error,
        change + _Z * error,
        error,
        "delta method from each run's standard error (one pair: noise within the runs, not between them)",
    )


def _bootstrap_method(n: int) -> str:
    return f"bootstrap over requests, {RESAMPLES} resamples, seed {SEED}, percentile method, n={n}"
