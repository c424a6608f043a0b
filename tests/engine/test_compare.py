"""Comparisons: deltas with their n, and decision checks in both directions."""

from __future__ import annotations

import pytest

from engine import ConfigError
from engine.compare import Criterion, compare, format_comparison


def report(variant, **values):
    metrics = {name: {"value": value, "unit": "ms" if name.endswith("_ms") else "tok/s", "n": 20} for name, value in values.items()}
    return {"scenario": {"name": "s"}, "variant": variant, "seed": 0, "complete": True, "metrics": metrics}


BASE = report("off", output_tok_s=100.0, ttft_p99_ms=800.0)


def test_criteria_parse_relative_and_absolute():
    assert Criterion.parse("output_tok_s:+20%") == Criterion("output_tok_s", 0.2, True)
    assert Criterion.parse("chat/ttft_p99_ms:-50%") == Criterion("chat/ttft_p99_ms", -0.5, True)
    assert Criterion.parse("preemptions:+3") == Criterion("preemptions", 3.0, False)
    with pytest.raises(ConfigError, match="expected METRIC:"):
        Criterion.parse("faster please")


@pytest.mark.parametrize(
    "candidate, intended, tolerated, passed",
    [
        (report("on", output_tok_s=125.0, ttft_p99_ms=850.0), ["output_tok_s:+20%"], ["ttft_p99_ms:+10%"], [True, True]),
        (report("on", output_tok_s=110.0, ttft_p99_ms=850.0), ["output_tok_s:+20%"], ["ttft_p99_ms:+10%"], [False, True]),
        (report("on", output_tok_s=125.0, ttft_p99_ms=900.0), ["output_tok_s:+20%"], ["ttft_p99_ms:+10%"], [True, False]),
        (report("on", output_tok_s=95.0, ttft_p99_ms=300.0), ["ttft_p99_ms:-50%"], ["output_tok_s:-10%"], [True, True]),
        (report("on", output_tok_s=80.0, ttft_p99_ms=300.0), ["ttft_p99_ms:-50%"], ["output_tok_s:-10%"], [True, False]),
    ],
)
def test_decision_checks(candidate, intended, tolerated, passed):
    result = compare(BASE, candidate, intended, tolerated)
    assert [check["passed"] for check in result["checks"]] == passed
    assert result["verdict"].startswith("accept" if all(passed) else "reject")
    assert all(check["n_baseline"] == 20 and check["n_candidate"] == 20 for check in result["checks"])


def test_table_shows_absolute_and_relative_deltas_with_n():
    result = compare(BASE, report("on", output_tok_s=150.0, ttft_p99_ms=400.0), [], [])
    rows = {row["metric"]: row for row in result["metrics"]}
    assert rows["output_tok_s"]["delta"] == 50.0 and rows["output_tok_s"]["relative"] == 0.5
    text = format_comparison(result)
    assert "+50.0%" in text and "20/20" in text and "no decision" in text


def test_unknown_metric_in_a_criterion_is_named():
    with pytest.raises(ConfigError, match="no metric 'latency'"):
        compare(BASE, BASE, ["latency:-10%"], [])
