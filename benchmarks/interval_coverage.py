"""How often each interval of workbench/analysis/intervals.py holds the true value, at the n the presets use:

    python -m benchmarks.interval_coverage [--datasets 2000]

For percentiles, over samples drawn from distributions whose percentiles are known; for shares
and their differences, exactly (every count weighted by its binomial chance). Beside each, the
estimator it replaced (the percentile bootstrap; Wilson's interval of a share; the Wald change of
two shares). tests/workbench/analysis/test_intervals.py asserts on the same functions; docs/scenarios.md
quotes the table.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import optimize, stats

from workbench.analysis.intervals import (
    LEVEL,
    Interval,
    difference_of_shares,
    order_statistic_ranks,
    share_interval,
    wilson,
)

SIZES = (10, 20, 40, 60, 100, 200, 2000)  # the n of the presets' runs and tags


def _bimodal_cdf(x: float) -> float:
    return 0.7 * stats.norm.cdf(x, 100, 10) + 0.3 * stats.norm.cdf(x, 400, 40)


# name -> (draw a (datasets, n) sample, the true q-th percentile)
DISTRIBUTIONS = {
    "lognormal": (lambda rng, shape: rng.lognormal(5, 1, shape), lambda q: math.exp(5 + stats.norm.ppf(q / 100))),
    "exponential": (lambda rng, shape: rng.exponential(100, shape), lambda q: -100 * math.log(1 - q / 100)),
    "bimodal": (
        lambda rng, shape: np.where(rng.random(shape) < 0.7, rng.normal(100, 10, shape), rng.normal(400, 40, shape)),
        lambda q: optimize.brentq(lambda x: _bimodal_cdf(x) - q / 100, 0, 1000),
    ),
    # Pareto (Lomax) with shape 1.5: infinite variance, the tail of a stalled server.
    "heavy tail": (lambda rng, shape: rng.pareto(1.5, shape), lambda q: stats.lomax.ppf(q / 100, 1.5)),
}


def order_statistic_coverage(samples: np.ndarray, q: float, truth: float) -> tuple[float, float]:
    """(held, promised): how often the order-statistic interval held the truth over the rows of
    `samples` (an unidentified side counts as unbounded), and the coverage its ranks promise."""
    n = samples.shape[1]
    low_rank, high_rank = order_statistic_ranks(n, q)
    ordered = np.sort(samples, axis=1)
    low = ordered[:, low_rank - 1] if low_rank else np.full(len(samples), -np.inf)
    high = ordered[:, high_rank - 1] if high_rank else np.full(len(samples), np.inf)
    count = stats.binom(n, q / 100)
    promised = (count.cdf(high_rank - 1) if high_rank else 1.0) - (count.cdf(low_rank - 1) if low_rank else 0.0)
    return float(np.mean((low <= truth) & (truth <= high))), float(promised)


def bootstrap_percentile_coverage(samples: np.ndarray, q: float, truth: float, resamples: int = 400) -> float:
    """The estimator the order statistics replaced: the percentile bootstrap's 95% interval."""
    rng = np.random.default_rng(0)
    datasets, n = samples.shape
    held = 0
    for start in range(0, datasets, 50):  # bounds the memory of (datasets, resamples, n) at n = 2,000
        chunk = samples[start : start + 50]
        picks = rng.integers(0, n, (len(chunk), resamples, n))
        estimates = np.percentile(np.take_along_axis(chunk[:, None, :], picks, axis=2), q, axis=2)
        low, high = np.percentile(estimates, [2.5, 97.5], axis=1)
        held += int(np.sum((low <= truth) & (truth <= high)))
    return held / datasets


def holds(interval: Interval, truth: float) -> bool:
    return interval.low - 1e-9 <= truth <= interval.high + 1e-9


def exact_share_coverage(interval_of, n: int, shares: tuple[float, ...]) -> list[float]:
    """The exact coverage of an interval of a share at n, for each true share: each count
    weighted by its chance."""
    intervals = [interval_of(count, n) for count in range(n + 1)]
    chances = [stats.binom.pmf(np.arange(n + 1), n, share) for share in shares]
    return [
        float(sum(chance for interval, chance in zip(intervals, weights) if holds(interval, 100 * share)))
        for share, weights in zip(shares, chances)
    ]


def exact_difference_coverage(interval_of, n: int, pairs: tuple[tuple[float, float], ...]) -> list[float]:
    """The exact coverage of an interval of share b - share a, both at n, for each true pair."""
    counts = np.arange(n + 1)
    intervals = {(a, b): interval_of(int(a), n, int(b), n) for a in counts for b in counts}
    coverage = []
    for share_a, share_b in pairs:
        chances = np.outer(stats.binom.pmf(counts, n, share_a), stats.binom.pmf(counts, n, share_b))
        truth = 100 * (share_b - share_a)
        coverage.append(float(sum(chances[key] for key, interval in intervals.items() if holds(interval, truth))))
    return coverage


def wilson_interval(hits: int, total: int) -> Interval:
    """The interval of a share that Clopper-Pearson's replaced."""
    low, high = wilson(hits, total)
    return Interval(100 * low, 100 * high, None, "Wilson")


def wald_difference(hits_a: int, total_a: int, hits_b: int, total_b: int) -> Interval:
    """The change of two shares that Newcombe's replaced: each share's Wald error, 0 at 0% and 100%."""
    share_a, share_b = hits_a / total_a, hits_b / total_b
    error = math.sqrt(share_a * (1 - share_a) / total_a + share_b * (1 - share_b) / total_b)
    change = 100 * (share_b - share_a)
    return Interval(change - 196 * error, change + 196 * error, None, "Wald")


SHARES = (0.5, 0.8, 0.9, 0.95, 0.99)
PAIRS_OF_SHARES = ((0.5, 0.5), (0.8, 0.9), (0.9, 0.9), (0.95, 0.99), (0.99, 0.99), (0.7, 0.95), (1.0, 1.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=2000, help="samples per distribution and n")
    args = parser.parse_args()
    print(f"Percentiles: order statistics (OS) against the percentile bootstrap (BS), {args.datasets} samples each")
    print("| distribution | n | p50 OS | p50 BS | p90 OS | p90 BS | p99 OS | p99 BS |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (draw, truth_of) in DISTRIBUTIONS.items():
        for n in SIZES:
            samples = draw(np.random.default_rng(n), (args.datasets, n))
            cells = []
            for q in (50, 90, 99):
                held, _ = order_statistic_coverage(samples, q, truth_of(q))
                bounded = all(order_statistic_ranks(n, q))
                cells.append(f"{held:.1%}" + ("" if bounded else " (one-sided)"))
                cells.append(f"{bootstrap_percentile_coverage(samples[:400], q, truth_of(q)):.1%}")
            print(f"| {name} | {n} | " + " | ".join(cells) + " |")
    print(f"\nA run's share (exact): Clopper-Pearson (CP) against Wilson (W), worst over true shares {SHARES}")
    print("| n | CP | W |")
    print("|---|---|---|")
    for n in SIZES[:-1]:
        clopper, wilson_ = (
            min(exact_share_coverage(method, n, SHARES)) for method in (share_interval, wilson_interval)
        )
        print(f"| {n} | {clopper:.1%} | {wilson_:.1%} |")
    print("\nA difference of two shares (exact): Newcombe (N) against the Wald change (Wald), worst over the pairs")
    print("| n | N | Wald |")
    print("|---|---|---|")
    for n in (10, 20, 40, 60):
        newcombe = min(exact_difference_coverage(difference_of_shares, n, PAIRS_OF_SHARES))
        wald = min(exact_difference_coverage(wald_difference, n, PAIRS_OF_SHARES))
        print(f"| {n} | {newcombe:.1%} | {wald:.1%} |")
    print(f"\nnominal level {LEVEL:.0%}")


if __name__ == "__main__":
    main()
