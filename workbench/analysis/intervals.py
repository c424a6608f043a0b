"""95% intervals for the figures a run reports, and for a change between two configurations.

Each method is used only at the n where its coverage has been shown against known distributions
(tests/workbench/analysis/test_intervals.py; the measured table is in docs/scenarios.md):

- a latency percentile: distribution-free order-statistic interval (`percentile_interval`): the
  ranks come from the binomial count of requests below the true percentile, so the interval
  holds at least its level whatever the latencies' distribution. A high percentile of a small
  sample has no upper bound (the p99 of 20 requests may lie above all of them): the bound is
  None, "not identified", and `requests_to_bound` says how many requests would give one;
- a share of requests (goodput): Clopper-Pearson's exact interval (`share_interval`), at least
  95% at every n and share (Wilson's dips to 90% at n = 10 and a true share of 99%, where goodput
  lives); the difference of two runs' shares: Newcombe's hybrid score interval from each run's
  Wilson interval (`difference_of_shares`), at least 94% over the grid tested;
- a change between one pair of runs in a percentile: both runs' order-statistic intervals at
  97.5% (`PAIR_LEVEL`), combined at their extremes (Bonferroni: at least 95% together, however
  the two runs' requests are related); a relative change is a ratio of positive bounds, never
  below -100% (`change_of_percentile`);
- repeated pairs of runs: Student's t over the paired changes, a relative one on the log ratio
  (`change_over_repeats`), so that it too stays above -100%;
- a deterministic figure (memory, quality scores on fixed text): no interval pretence: its
  change is exact (`Interval.exact`), and a zero change is no change;
- a rate over a run (output tokens/s): batch means over `BLOCKS` equal time blocks, Student's t
  (`rate_interval`): how steady the run was, for error bars; a decision on one pair of runs does
  not use it (a run's ramp-up and drain are no stationary process), repeats do.

A bound that is None is not identified by the data; every interval names its method, level and n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

LEVEL = 0.95
# The time blocks of a rate's batch means.
BLOCKS = 10
# Each run's interval when two are combined into one for their change (Bonferroni).
PAIR_LEVEL = 1 - (1 - LEVEL) / 2
EXACT = "deterministic"  # the method of a figure without noise (Interval.exact)


@dataclass(frozen=True)
class Interval:
    low: float | None  # None: not identified (unbounded below)
    high: float | None  # None: not identified (unbounded above)
    standard_error: float | None  # where the method has one
    method: str

    def as_dict(self) -> dict:
        return {"low": self.low, "high": self.high, "standard_error": self.standard_error, "method": self.method}

    @classmethod
    def from_dict(cls, entry: dict | None) -> Interval | None:
        if not isinstance(entry, dict) or not {"low", "high", "standard_error", "method"} <= set(entry):
            return None
        return cls(entry["low"], entry["high"], entry["standard_error"], entry["method"])

    @property
    def identified(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def half_width(self) -> float | None:
        return (self.high - self.low) / 2 if self.identified else None

    @classmethod
    def exact(cls, value: float, why: str) -> Interval:
        """The zero-width interval of a figure no run-to-run noise moves (a quality score on fixed
        text, the bytes of the weights): `why` says what fixes it."""
        return cls(value, value, 0.0, f"{EXACT}: {why}")

    @property
    def is_exact(self) -> bool:
        return self.method.startswith(EXACT)


def order_statistic_ranks(n: int, q: float, level: float = LEVEL) -> tuple[int | None, int | None]:
    """The 1-based ranks (r, s) of the order statistics that bound the q-th percentile with at
    least `level` coverage, each tail at most (1 - level) / 2; None where no rank can (n too small
    for that tail). With B ~ Binomial(n, q/100) the requests below the true percentile,
    P(X(r) > percentile) = P(B < r) and P(X(s) < percentile) <= P(B >= s)."""
    tail = (1 - level) / 2
    counts = np.arange(n + 1)
    below = stats.binom.cdf(counts, n, q / 100)  # P(B <= k)
    at_least = stats.binom.sf(counts - 1, n, q / 100)  # P(B >= k)
    lows = np.flatnonzero(below[:-1] <= tail)  # k = r - 1 with P(B <= r - 1) <= tail
    highs = np.flatnonzero(at_least[1:] <= tail)  # k = s - 1 with P(B >= s) <= tail
    return (int(lows[-1]) + 1 if lows.size else None, int(highs[0]) + 1 if highs.size else None)


def requests_to_bound(q: float, level: float = LEVEL) -> int:
    """The fewest requests whose order statistics bound the q-th percentile on both sides."""
    tail = (1 - level) / 2
    p = max(q, 100 - q) / 100
    n = max(1, math.ceil(math.log(tail) / math.log(p)))
    while None in order_statistic_ranks(n, q, level):
        n += 1
    return n


def percentile_interval(values: list[float], q: float, level: float = LEVEL) -> Interval | None:
    """The order-statistic interval of the q-th percentile of one value per request; None
    without values. A side the sample cannot bound is None and the method says so."""
    data = np.sort(np.asarray(values, dtype=np.float64))
    if data.size == 0:
        return None
    low_rank, high_rank = order_statistic_ranks(data.size, q, level)
    low = float(data[low_rank - 1]) if low_rank else None
    high = float(data[high_rank - 1]) if high_rank else None
    method = f"order statistics (distribution-free), {level:.1%}, n={data.size}"
    if low is None or high is None:
        sides = " and ".join(side for side, bound in (("lower", low), ("upper", high)) if bound is None)
        method += (
            f"; {sides} bound not identified: p{q:g} of {data.size} requests; "
            f"about {requests_to_bound(q, level)} would bound it"
        )
    return Interval(low, high, None, method)


def wilson(hits: int, total: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval of hits / total, as fractions."""
    low, high = stats.binomtest(hits, total).proportion_ci(confidence_level=level, method="wilson")
    return float(low), float(high)


def share_interval(hits: int, total: int) -> Interval | None:
    """Clopper-Pearson's exact interval of a share of requests, in percent; None without
    requests. It stays wide at 0% and 100% (10 of 10: 69% to 100%), where the Wald error is 0."""
    if total == 0:
        return None
    low, high = stats.binomtest(hits, total).proportion_ci(confidence_level=LEVEL, method="exact")
    return Interval(100 * float(low), 100 * float(high), None, f"Clopper-Pearson (exact binomial), n={total}")


def difference_of_shares(hits_a: int, total_a: int, hits_b: int, total_b: int) -> Interval | None:
    """Newcombe's hybrid score interval (his method 10) of share b - share a, in percentage
    points; None when either run has no requests."""
    if not total_a or not total_b:
        return None
    share_a, share_b = hits_a / total_a, hits_b / total_b
    (low_a, high_a), (low_b, high_b) = wilson(hits_a, total_a), wilson(hits_b, total_b)
    difference = share_b - share_a
    low = difference - math.sqrt((share_b - low_b) ** 2 + (high_a - share_a) ** 2)
    high = difference + math.sqrt((high_b - share_b) ** 2 + (share_a - low_a) ** 2)
    return Interval(
        100 * low, 100 * high, None, f"Newcombe's hybrid score interval of a difference, n={total_a}/{total_b}"
    )


def change_of_percentile(baseline: Interval, candidate: Interval, relative: bool) -> Interval:
    """The change between two runs' percentiles from their PAIR_LEVEL intervals (Bonferroni: at
    least LEVEL together): candidate's lowest against baseline's highest, and the other way.
    Relative: a ratio of latencies, never below -100%; unbounded where a bound is missing."""
    if relative:
        # A ratio's lowest is the candidate's lowest over the baseline's highest; latencies are not
        # negative, so a missing bound on either side leaves the ratio's lowest at 0 (-100%).
        low = -1.0 if candidate.low is None or not baseline.high else candidate.low / baseline.high - 1
        high = (
            None
            if candidate.high is None or not baseline.low  # a zero or missing baseline bound: unbounded
            else candidate.high / baseline.low - 1
        )
    else:
        low = None if candidate.low is None or baseline.high is None else candidate.low - baseline.high
        high = None if candidate.high is None or baseline.low is None else candidate.high - baseline.low
    method = f"each run's {PAIR_LEVEL:.1%} order-statistic interval, combined at their extremes (Bonferroni)"
    return Interval(low, high, None, method)


def change_over_repeats(baselines: list[float], candidates: list[float], relative: bool) -> Interval | None:
    """Student's t interval of the mean paired change, one pair of runs per repeat: the log ratio
    for a relative change (a multiplicative noise, bounded at -100%), the difference otherwise.
    None under two pairs, or for a relative change of a figure that is not positive."""
    if len(baselines) < 2:
        return None
    first, second = np.asarray(baselines, dtype=np.float64), np.asarray(candidates, dtype=np.float64)
    if relative:
        if np.any(first <= 0) or np.any(second <= 0):
            return None
        changes = np.log(second / first)
    else:
        changes = second - first
    interval = repeats_interval(list(changes), what=f"paired repeats{' of the log ratio' if relative else ''}")
    if relative:
        return replace(interval, low=math.expm1(interval.low), high=math.expm1(interval.high))
    return interval


def rate_interval(event_times: list[float], start: float, duration: float) -> Interval | None:
    """The batch-means interval of events per second (output tokens) over `duration` seconds
    from `start`: the rate in each of BLOCKS equal blocks, Student's t over them; None without a
    duration or events."""
    if duration <= 0 or not event_times:
        return None
    counts = np.histogram(event_times, bins=BLOCKS, range=(start, start + duration))[0]
    interval = repeats_interval(list(counts * BLOCKS / duration), what="equal time blocks (batch means)")
    if interval.low < 0:  # a bursty run's blocks spread past 0; a rate cannot be negative
        return Interval(0.0, interval.high, interval.standard_error, f"{interval.method}, clipped at 0")
    return interval


def repeats_interval(values: list[float], what: str = "runs") -> Interval | None:
    """The t interval of the mean of one value per run; None under two."""
    data = np.asarray(values, dtype=np.float64)
    if data.size < 2:
        return None
    error = float(data.std(ddof=1) / math.sqrt(data.size))
    spread = float(stats.t.ppf(0.5 + LEVEL / 2, data.size - 1)) * error
    mean = float(data.mean())
    few = "; 1 degree of freedom: 12.7 standard errors wide, little evidence" if data.size == 2 else ""
    return Interval(mean - spread, mean + spread, error, f"Student's t over {data.size} {what}{few}")


def bounds_text(low: float | None, high: float | None, show=lambda value: f"{value:,.2f}") -> str:
    """An interval's ends in words: "12.00 to 30.00", "at least 12.00 (no upper bound from this n)"."""
    if low is not None and high is not None:
        return f"{show(low)} to {show(high)}"
    if low is not None:
        return f"at least {show(low)} (no upper bound from this n)"
    if high is not None:
        return f"at most {show(high)} (no lower bound from this n)"
    return "not bounded at this n"
