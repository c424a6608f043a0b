"""The intervals against distributions whose answers are known: over many samples, a 95%
interval must hold the true value about 95% of the time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.intervals import change_from_errors, percentile_interval, repeats_interval, share_interval

DATASETS = 200


def coverage(make_interval, truth: float) -> float:
    held = 0
    for seed in range(DATASETS):
        interval = make_interval(np.random.default_rng(1000 + seed))
        held += interval.low <= truth <= interval.high
    return held / DATASETS


@pytest.mark.parametrize("q", [50, 90])
def test_the_bootstrap_interval_of_a_percentile_holds_the_true_percentile_about_95_percent_of_the_time(q):
    # Exponential with mean 100 ms: the q-th percentile is -100 ln(1 - q/100).
    truth = -100 * math.log(1 - q / 100)
    held = coverage(lambda rng: percentile_interval(list(rng.exponential(100, 400)), q), truth)
    assert 0.90 <= held <= 0.99, held


def test_the_t_interval_over_five_runs_holds_the_true_mean_about_95_percent_of_the_time():
    held = coverage(lambda rng: repeats_interval(list(rng.normal(300, 30, 5))), 300)
    assert 0.90 <= held <= 0.99, held


def test_wilsons_interval_holds_the_true_share_about_95_percent_of_the_time():
    held = coverage(lambda rng: share_interval(int(rng.binomial(60, 0.8)), 60), 80.0)
    assert 0.90 <= held <= 0.995, held


def test_the_delta_method_interval_of_a_ratio_holds_the_true_ratio():
    def ratio_interval(rng):
        base, cand = rng.normal(100, 5, 200), rng.normal(110, 5, 200)
        error = lambda sample: sample.std(ddof=1) / math.sqrt(sample.size)  # noqa: E731
        return change_from_errors(base.mean(), cand.mean(), error(base), error(cand), relative=True)

    assert 0.90 <= coverage(ratio_interval, 0.10) <= 0.99


def test_too_few_values_give_no_interval():
    assert percentile_interval([5.0], 50) is None
    assert repeats_interval([5.0]) is None
    assert share_interval(0, 0) is None
    constant = percentile_interval([7.0] * 10, 99)
    assert (constant.low, constant.high, constant.standard_error) == (7.0, 7.0, 0.0)
