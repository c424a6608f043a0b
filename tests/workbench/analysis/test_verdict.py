"""The verdict on constructed evidence: each of the three outcomes, pairing by repeat, the
estimate of the repeats that would decide, subgroups too small to judge, and an A/A comparison
that must not come out "accept" more often than the nominal rate."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import ConfigError
from workbench.analysis.compare import allow_for_drift, compare, compare_repeats, format_comparison
from workbench.analysis.intervals import PAIR_LEVEL, Interval, percentile_interval, share_interval
from workbench.analysis.verdict import MIN_SUBGROUP_REQUESTS, Term, decide


def term(kind, threshold, low, high, estimate=None, n=100, runs=5, metric_is_tag=False):
    if estimate is None:
        estimate = low if high is None else (low + high) / 2
    return Term(
        kind=kind,
        criterion=f"m:{threshold * 100:+g}%",
        threshold=threshold,
        relative=True,
        estimate=estimate,
        interval=Interval(low, high, None if high is None else (high - low) / 3.92, "constructed"),
        runs=runs,
        n_baseline=n,
        n_candidate=n,
        subgroup=metric_is_tag,
    )


@pytest.mark.parametrize(
    "kind, threshold, low, high, status",
    [
        ("intended", +0.10, 0.12, 0.20, "reached"),
        ("intended", +0.10, 0.02, 0.08, "short"),
        ("intended", +0.10, 0.05, 0.15, "uncertain"),
        ("intended", -0.10, -0.30, -0.11, "reached"),  # a reduction: the whole interval below -10%
        ("intended", -0.10, -0.30, -0.10, "uncertain"),  # touching the threshold is not past it
        ("intended", -0.10, -0.30, -0.05, "uncertain"),
        ("intended", -0.10, -0.02, 0.04, "short"),
        ("intended", -0.00, 0.00, 0.00, "short"),  # an exact zero change is never a gain, not even "any gain"
        ("intended", +0.00, 0.00, 0.00, "short"),
        ("intended", -0.10, -1.00, None, "uncertain"),  # no upper bound: cannot be reached
        ("intended", +0.10, 0.12, None, "reached"),  # a gain bounded below is reached without an upper bound
        ("tolerated", +0.10, 0.00, 0.09, "within"),
        ("tolerated", +0.10, 0.00, 0.10, "uncertain"),  # touching the bound is not strictly inside it
        ("tolerated", +0.10, 0.00, None, "uncertain"),
        ("tolerated", +0.00, 0.00, 0.00, "within"),  # a deterministic figure that did not move
        ("tolerated", +0.10, 0.11, 0.20, "crossed"),
        ("tolerated", +0.10, 0.05, 0.15, "uncertain"),
        ("tolerated", -0.10, -0.08, 0.30, "within"),  # a throughput drop tolerated down to -10%
        ("tolerated", -0.10, -0.20, -0.12, "crossed"),
    ],
)
def test_each_term_is_judged_on_its_whole_interval(kind, threshold, low, high, status):
    assert term(kind, threshold, low, high).status == status


def test_the_three_verdicts():
    reached, within = term("intended", 0.1, 0.12, 0.2), term("tolerated", 0.1, 0.0, 0.05)
    assert decide([reached, within])[0] == "accept"
    assert decide([reached, term("tolerated", 0.1, 0.12, 0.2)]) == (
        "reject",
        "reject: the 95% interval lies wholly on the wrong side of m:+10%",
    )
    assert decide([term("intended", 0.1, 0.0, 0.05), within])[0] == "reject"
    word, text = decide([term("intended", 0.1, 0.05, 0.15, estimate=0.15, runs=5), within])
    # Half-width 0.05 at 5 runs, 0.05 from the threshold: 5 * (0.05 / 0.05)^2 = 5, so one more.
    assert word == "inconclusive" and text.endswith("about 6 paired repeats would decide it")
    word, text = decide([reached, term("tolerated", 0.1, 0.05, 0.15)])
    assert word == "accept" and "cannot yet rule out crossing m:+10%" in text
    assert decide([])[0] == "none"


def test_repeats_needed_grow_with_the_square_of_the_interval_over_the_distance():
    assert term("intended", 0.1, 0.0, 0.3, estimate=0.15, runs=3).repeats_needed() == 3 * 9  # (0.15/0.05)^2 = 9
    assert term("intended", 0.1, 0.0, 0.2, estimate=0.1, runs=3).repeats_needed() is None  # on the threshold
    assert term("intended", 0.1, 0.12, 0.2).repeats_needed() is None  # decided
    # Almost on the threshold (an A/A check's estimate): the count is no advice, and says so.
    almost = term("intended", 0.0, -0.5, 0.5, estimate=0.007, runs=4)
    assert almost.repeats_needed() > 20_000
    assert decide([almost])[1].endswith(
        "more than 100 paired repeats would be needed: the estimate sits almost on the threshold"
    )


def test_a_tag_with_too_few_requests_is_not_judged_and_says_so():
    small = term("intended", 0.1, 0.5, 0.6, n=MIN_SUBGROUP_REQUESTS - 1, metric_is_tag=True)
    assert small.status == "uncertain" and "too few requests in this tag" in small.note
    assert decide([small])[0] == "inconclusive"
    assert term("intended", 0.1, 0.5, 0.6, n=MIN_SUBGROUP_REQUESTS, metric_is_tag=True).status == "reached"


def run(value, standard_error=None, n=200, seed=0, name="output_tok_s", unit="output tokens/s"):
    interval = None
    if standard_error is not None:
        interval = {
            "low": value - 1.96 * standard_error,
            "high": value + 1.96 * standard_error,
            "standard_error": standard_error,
            "method": "constructed",
        }
    metrics = {name: {"value": value, "unit": unit, "n": n, "interval": interval}}
    return {"scenario": {"name": "s"}, "variant": None, "seed": seed, "complete": True, "metrics": metrics}


def test_pairing_by_repeat_removes_the_machines_drift_between_repeats():
    # The machine's speed moves by a third between repeats, and the candidate is 10% faster than
    # the baseline of its own repeat every time (within +-1%).
    speeds = [300.0, 220.0, 260.0, 330.0, 240.0]
    gains = [1.10, 1.09, 1.11, 1.10, 1.095]
    pairs = [(run(speed, seed=i), run(speed * gain, seed=i)) for i, (speed, gain) in enumerate(zip(speeds, gains))]
    result = compare_repeats(pairs, ["output_tok_s:+5%"], [])
    assert result["decision"] == "accept"
    check = result["checks"][0]
    assert check["runs"] == 5 and check["interval"]["method"] == "Student's t over 5 paired repeats of the log ratio"
    assert 0.085 < check["interval"]["low"] < check["estimate"] < check["interval"]["high"] < 0.11
    # Unpaired, the per-variant intervals overlap widely: the table's own intervals say so.
    rows = {row["metric"]: row for row in result["metrics"]}
    assert rows["output_tok_s"]["candidate_interval"]["low"] < rows["output_tok_s"]["baseline_interval"]["high"]
    assert rows["output_tok_s"]["n_baseline"] == 5 * 200  # the requests of all runs
    text = format_comparison(result)
    assert "5 repeats of each" in text and "REACHED" in text and "5 pairs of runs" in text
    assert "beyond doubt" not in text


def percentile_run(values: list[float], name="ttft_p50_ms", q=50, model="simulated:llama-3-8b@a100-80gb") -> dict:
    """A run whose report holds one percentile of `values` with its intervals, as report.py writes
    it; on the simulated GPU unless `model` says otherwise."""
    entry = {
        "value": float(np.percentile(values, q)),
        "unit": "ms",
        "n": len(values),
        "interval": percentile_interval(values, q).as_dict(),
        "pair_interval": percentile_interval(values, q, PAIR_LEVEL).as_dict(),
    }
    scenario = {"name": "s", "engine": {"model": model}}
    return {"scenario": scenario, "variant": None, "seed": 0, "complete": True, "metrics": {name: entry}}


def test_one_pair_on_a_real_machine_decides_no_measured_figure_however_far_apart():
    """same-twice on the bundled model, one pair, while the machine was busy: TPOT p50 178 vs 110
    ms/token, "-38.1% [-68.1%, -0.5%] REACHED ... accept" for two identical arms."""
    rng = np.random.default_rng(2)
    first = percentile_run(list(rng.lognormal(5.2, 0.3, 48)), "tpot_p50_ms", model="smollm2-135m")
    second = percentile_run(list(rng.lognormal(4.7, 0.3, 48)), "tpot_p50_ms", model="smollm2-135m")
    result = compare(first, second, ["tpot_p50_ms:-0%"], [])
    (check,) = result["checks"]
    assert check["interval"]["high"] < 0 and check["status"] == "uncertain"  # apart, and still undecided
    assert result["decision"] == "inconclusive" and "repeat the runs (--repeat 3 or more)" in result["verdict"]
    simulated = compare(percentile_run([100.0] * 48), percentile_run([50.0] * 48), ["ttft_p50_ms:-10%"], [])
    assert simulated["decision"] == "accept"  # the simulated GPU's runs repeat exactly: one pair decides


def test_one_measured_run_against_one_simulated_run_is_uncertain_either_way_round():
    """Issue 58's planted bug: the one-pair rule with `or` for `and` let a pair decide when
    either run was simulated. Only a pair of simulated runs repeats exactly; a measured run on
    either side brings its run-to-run noise, which one pair cannot measure."""
    rng = np.random.default_rng(3)
    measured = percentile_run(list(rng.lognormal(5.2, 0.3, 48)), model="smollm2-135m")
    simulated = percentile_run([50.0] * 48)
    for first, second in ((measured, simulated), (simulated, measured)):
        result = compare(first, second, ["ttft_p50_ms:-10%"], [])
        (check,) = result["checks"]
        assert check["status"] == "uncertain" and result["decision"] == "inconclusive"


def test_one_pair_takes_its_interval_from_the_two_runs_and_without_one_is_inconclusive():
    rng = np.random.default_rng(0)
    faster = compare(
        percentile_run(list(rng.lognormal(6, 0.3, 100))),
        percentile_run(list(rng.lognormal(6, 0.3, 100) * 0.5)),
        ["ttft_p50_ms:-20%"],
        [],
    )
    check = faster["checks"][0]
    assert check["estimate"] == pytest.approx(-0.5, abs=0.1) and "Bonferroni" in check["interval"]["method"]
    assert -1 < check["interval"]["low"] < check["interval"]["high"] < -0.2
    assert faster["decision"] == "accept"
    # output tok/s has no interval within a run: one pair cannot decide on it.
    without = compare(run(100.0), run(150.0), ["output_tok_s:+10%"], [])
    assert without["decision"] == "inconclusive"
    assert "no interval for a change of this figure over one pair of runs" in without["checks"][0]["note"]


def test_a_p99_of_20_requests_is_not_decided_and_the_verdict_says_what_would_decide_it():
    rng = np.random.default_rng(1)
    chats = compare(
        percentile_run(list(rng.lognormal(8, 0.2, 20)), "chat/ttft_p99_ms", 99),
        percentile_run(list(rng.lognormal(8, 0.2, 20) / 10), "chat/ttft_p99_ms", 99),
        ["chat/ttft_p99_ms:-50%"],
        [],
    )
    check = chats["checks"][0]
    assert check["status"] == "uncertain" and check["interval"]["high"] is None
    assert check["estimate"] == pytest.approx(-0.9, abs=0.05)  # a tenfold drop, and still not decided
    assert "p99 of 20 requests: not bounded above; about 437 requests per run" in chats["verdict"]
    assert chats["decision"] == "inconclusive" and check["repeats_needed"] is None
    assert "no upper bound from this n" in format_comparison(chats)


def test_two_runs_of_ten_requests_each_at_100_percent_goodput_decide_nothing_about_a_loss():
    both_met = [run(100.0, n=10, name="goodput_perc", unit="%")]
    both_met[0]["metrics"]["goodput_perc"]["interval"] = share_interval(10, 10).as_dict()
    result = compare(both_met[0], both_met[0], [], ["goodput_perc:-5pp"])
    check = result["checks"][0]
    assert check["status"] == "uncertain" and check["interval"]["low"] < -25 and check["interval"]["high"] > 25
    assert "Newcombe" in check["interval"]["method"]
    with pytest.raises(ConfigError, match=r"goodput_perc is a share of requests: state its change in points"):
        compare(both_met[0], both_met[0], ["goodput_perc:+10%"], [])


def test_a_relative_change_is_never_below_minus_100_percent_over_repeats_or_under_drift():
    pairs = [(run(100.0 * speed, seed=i), run(5.0 * speed, seed=i)) for i, speed in enumerate((1.0, 3.0, 0.4))]
    check = compare_repeats(pairs, ["output_tok_s:-50%"], [])["checks"][0]
    assert check["interval"]["low"] > -1 and check["interval"]["method"].endswith("of the log ratio")
    two = compare_repeats(pairs[:2], ["output_tok_s:-50%"], [])["checks"][0]
    assert "2 pairs of runs: Student's t with 1 degree of freedom" in two["note"]
    widened = allow_for_drift(
        [Term("intended", "ttft_p50_ms:-50%", -0.5, True, -0.9, Interval(-0.99, -0.8, None, "x"), 1, 100, 100)], 2.37
    )
    assert widened[0].interval.low > -1  # a 237% drift, as measured once here: -101.4% before


def with_exact(report: dict, name: str, value: float, n: int = 1) -> dict:
    interval = Interval.exact(value, "constructed").as_dict()
    unit = "MiB" if name.endswith("_mib") else "% of tokens"
    report["metrics"][name] = {"value": value, "unit": unit, "n": n, "interval": interval}
    return report


def test_memory_and_quality_figures_are_judged_whole_and_keep_one_runs_n_over_repeats():
    """memory/ and quality/ name no tag: a term on them is judged (n = 1 engine is not a small
    subgroup), and over repeats they keep their zero-width interval and one run's n."""
    pairs = [
        (
            with_exact(with_exact(run(300.0 + i, seed=i), "memory/weights_mib", 513.0), "quality/top1", 100.0, 4082),
            with_exact(with_exact(run(280.0 + i, seed=i), "memory/weights_mib", 171.4), "quality/top1", 99.2, 4082),
        )
        for i in range(3)
    ]
    result = compare_repeats(pairs, ["memory/weights_mib:-50%"], ["quality/top1:-5pp"])
    assert [check["status"] for check in result["checks"]] == ["reached", "within"]
    assert result["decision"] == "accept"
    rows = {row["metric"]: row for row in result["metrics"]}
    assert rows["quality/top1"]["n_candidate"] == 4082 and rows["memory/weights_mib"]["n_baseline"] == 1
    assert rows["memory/weights_mib"]["candidate_interval"]["high"] == 171.4
    assert rows["output_tok_s"]["n_baseline"] == 3 * 200  # a measured figure still sums its runs' requests
    text = format_comparison(result)  # an absolute change shows its unit: points here
    assert "estimate -0.8pp [95% -0.8pp to -0.8pp] (n 4082/4082, 3 pairs of runs)" in text
    assert "estimate -66.6% [95% -66.6% to -66.6%] (n 1/1" in text


def test_an_interval_across_runs_stays_within_what_the_figure_can_be():
    # Goodput of 0, 0 and 30% (and 100, 100, 70%): Student's t reaches below 0 (above 100); a
    # share of requests cannot. A latency can exceed any bound above zero.
    pairs = [
        (run(low, name="goodput_perc", unit="%"), run(high, name="goodput_perc", unit="%"))
        for low, high in ((0, 100), (0, 100), (30, 70))
    ]
    row = compare_repeats(pairs, [], [])["metrics"][0]
    assert row["baseline_interval"]["low"] == 0.0 and row["baseline_interval"]["method"].endswith(", clipped at 0")
    assert 30 < row["baseline_interval"]["high"] < 100
    assert row["candidate_interval"]["high"] == 100.0 and row["candidate_interval"]["method"].endswith("clipped at 100")
    latency = [
        (run(value, name="ttft_p99_ms", unit="ms"), run(value, name="ttft_p99_ms", unit="ms"))
        for value in (80, 90, 130)
    ]
    assert compare_repeats(latency, [], [])["metrics"][0]["baseline_interval"]["high"] > 100


def aa_accept_rate(repeats: int, experiments: int, seed: int = 0) -> float:
    """Two identical variants: every run's throughput is the machine's speed of its repeat
    (drifting by 15% between repeats) times request-level noise of 3%."""
    rng = np.random.default_rng(seed)
    accepted = 0
    for _ in range(experiments):
        pairs = []
        for index in range(repeats):
            speed = 300.0 * rng.lognormal(0.0, 0.15)
            pairs.append((run(speed * rng.lognormal(0, 0.03), seed=index), run(speed * rng.lognormal(0, 0.03))))
        accepted += compare_repeats(pairs, ["output_tok_s:+0%"], [])["decision"] == "accept"
    return accepted / experiments


def test_an_a_a_comparison_is_accepted_no_more_often_than_the_nominal_rate():
    # "+0%": any gain. The one-sided error of a 95% two-sided interval is 2.5%; over 2,000
    # experiments the rate's standard error is 0.35 points.
    assert aa_accept_rate(repeats=5, experiments=2000) <= 0.035
    assert aa_accept_rate(repeats=2, experiments=2000) <= 0.035
