"""Comparisons: deltas with their n, and decision checks in both directions."""

from __future__ import annotations

import pytest

from engine import ConfigError
from workbench.analysis.compare import Criterion, compare, format_comparison
from workbench.analysis.intervals import Interval


def report(variant, **values):
    """A report whose figures are deterministic (a simulated backend's): each decision turns on
    the exact change, strictly past its threshold or not."""
    metrics = {
        name: {
            "value": value,
            "unit": "ms" if name.endswith("_ms") else "events" if name == "preemptions" else "tok/s",
            "n": 20,
            "interval": None if value is None or value != value else Interval.exact(value, "constructed").as_dict(),
        }
        for name, value in values.items()
    }
    scenario = {"name": "s", "engine": {"model": "simulated:llama-3-8b@a100-80gb"}}
    return {"scenario": scenario, "variant": variant, "seed": 0, "complete": True, "metrics": metrics}


BASE = report("off", output_tok_s=100.0, ttft_p99_ms=800.0)


def test_criteria_parse_relative_and_absolute():
    assert Criterion.parse("output_tok_s:+20%") == Criterion("output_tok_s", 0.2, True)
    assert Criterion.parse("chat/ttft_p99_ms:-50%") == Criterion("chat/ttft_p99_ms", -0.5, True)
    assert Criterion.parse("preemptions:+3") == Criterion("preemptions", 3.0, False)
    with pytest.raises(ConfigError, match="expected METRIC:"):
        Criterion.parse("faster please")


@pytest.mark.parametrize(
    "candidate, intended, tolerated, statuses",
    [
        (
            report("on", output_tok_s=125.0, ttft_p99_ms=850.0),
            ["output_tok_s:+20%"],
            ["ttft_p99_ms:+10%"],
            ["reached", "within"],
        ),
        (
            report("on", output_tok_s=110.0, ttft_p99_ms=850.0),
            ["output_tok_s:+20%"],
            ["ttft_p99_ms:+10%"],
            ["short", "within"],
        ),
        (
            report("on", output_tok_s=125.0, ttft_p99_ms=900.0),
            ["output_tok_s:+20%"],
            ["ttft_p99_ms:+10%"],
            ["reached", "crossed"],
        ),
        (
            report("on", output_tok_s=95.0, ttft_p99_ms=300.0),
            ["ttft_p99_ms:-50%"],
            ["output_tok_s:-10%"],
            ["reached", "within"],
        ),
        (
            report("on", output_tok_s=80.0, ttft_p99_ms=300.0),
            ["ttft_p99_ms:-50%"],
            ["output_tok_s:-10%"],
            ["reached", "crossed"],
        ),
    ],
)
def test_decision_checks(candidate, intended, tolerated, statuses):
    result = compare(BASE, candidate, intended, tolerated)
    assert [check["status"] for check in result["checks"]] == statuses
    assert result["decision"] == ("accept" if statuses == ["reached", "within"] else "reject")
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


def test_the_comparison_record_and_table_exactly():
    baseline = report("off", output_tok_s=100.0, ttft_p50_ms=800.0, preemptions=4)
    baseline["metrics"]["only_in_baseline"] = {"value": 1.0, "unit": "x", "n": 3, "interval": None}
    candidate = report("on", output_tok_s=125.0, ttft_p50_ms=880.0, preemptions=6)
    candidate["metrics"]["ttft_p50_ms"]["n"] = 19
    for run, low, high, pair_low, pair_high in (
        (baseline, 760.0, 840.0, 750.0, 850.0),
        (candidate, 836.0, 924.0, 830.0, 930.0),
    ):
        entry = run["metrics"]["ttft_p50_ms"]
        entry["interval"] = Interval(low, high, None, "m").as_dict()
        entry["pair_interval"] = Interval(pair_low, pair_high, None, "m").as_dict()
    result = compare(baseline, candidate, ["output_tok_s:+20%", "preemptions:+3"], ["ttft_p50_ms:+5%"])
    # +25% is past +20% exactly; +2 preemptions falls short of an intended +3; the TTFT's +10%:
    # from 830 / 850 - 1 = -2.4% to 930 / 750 - 1 = +24.0%, which may or may not cross +5%.
    assert [(check["criterion"], check["status"], check["estimate"]) for check in result["checks"]] == [
        ("output_tok_s:+20%", "reached", pytest.approx(0.25)),
        ("preemptions:+3", "short", 2.0),
        ("ttft_p50_ms:+5%", "uncertain", pytest.approx(0.1)),
    ]
    assert [(check["kind"], check["n_baseline"], check["n_candidate"]) for check in result["checks"]] == [
        ("intended", 20, 20),
        ("intended", 20, 20),
        ("tolerated", 20, 19),
    ]
    assert result["verdict"] == "reject: the 95% interval lies wholly on the wrong side of preemptions:+3"
    assert result["baseline"] == {"scenario": "s", "variant": "off", "seed": 0, "complete": True}
    assert format_comparison(result).splitlines() == [
        "baseline:  s / off (seed 0)",
        "candidate: s / on (seed 0)",
        "",
        "metric                                 baseline    candidate        delta      rel  n (b/c)  unit; "
        "95% intervals",
        "only_in_baseline                           1.00            -            -        -  3/0  x",
        "output_tok_s                             100.00       125.00        25.00   +25.0%  20/20  tok/s; "
        "b [100.00 to 100.00], c [125.00 to 125.00]",
        "preemptions                                   4            6            2   +50.0%  20/20  events; "
        "b [4.00 to 4.00], c [6.00 to 6.00]",
        "ttft_p50_ms                              800.00       880.00        80.00   +10.0%  20/19  ms; "
        "b [760.00 to 840.00], c [836.00 to 924.00]",
        "",
        "decision record:",
        "  REACHED   intended  output_tok_s:+20%            estimate +25.0% [95% +25.0% to +25.0%] (n 20/20, 1 pair of "
        "runs)",
        "  SHORT     intended  preemptions:+3               estimate +2 events [95% +2 events to +2 events] (n 20/20, "
        "1 pair of runs)",
        "  UNCERTAIN tolerated ttft_p50_ms:+5%              estimate +10.0% [95% -2.4% to +24.0%] (n 20/19, 1 pair of "
        "runs; about 7 paired repeats would decide it)",
        "verdict: reject: the 95% interval lies wholly on the wrong side of preemptions:+3",
    ]


@pytest.mark.parametrize(
    "value, tolerated, status",
    [
        (91.0, "-10%", "within"),
        (90.0, "-10%", "within"),  # exactly on the bound of a deterministic figure: no further than it
        (89.0, "-10%", "crossed"),
        (150.0, "-10%", "within"),
        (109.0, "+10%", "within"),
        (111.0, "+10%", "crossed"),
        (50.0, "+10%", "within"),
    ],
)
def test_a_tolerated_regression_allows_its_amount_in_its_direction(value, tolerated, status):
    candidate = report("on", output_tok_s=value, ttft_p99_ms=800.0)  # the baseline has 100
    (check,) = compare(BASE, candidate, [], [f"output_tok_s:{tolerated}"])["checks"]
    assert check["status"] == status


def test_unmeasurable_metrics_and_incomplete_runs_give_no_pass_and_no_verdict():
    missing = report("on", output_tok_s=None, ttft_p99_ms=float("nan"))
    result = compare(BASE, missing, ["output_tok_s:+1%"], ["ttft_p99_ms:+1%"])
    assert [(check["status"], check["note"]) for check in result["checks"]] == [
        ("uncertain", "not measurable in both runs")
    ] * 2
    assert result["decision"] == "inconclusive"
    zero = report("off", output_tok_s=0.0, ttft_p99_ms=800.0)
    rows = {row["metric"]: row for row in compare(zero, BASE, [], [])["metrics"]}
    assert (
        rows["output_tok_s"]["delta"] == 100.0 and rows["output_tok_s"]["relative"] is None
    )  # no relative change from 0
    cut_short = {
        **report("on", output_tok_s=200.0, ttft_p99_ms=100.0),
        "complete": False,
        "incomplete_because": ["planned requests never sent: 3"],
    }
    verdict = compare(BASE, cut_short, ["output_tok_s:+20%"], [])["verdict"]
    assert verdict == "no verdict: incomplete run: candidate (planned requests never sent: 3)"
    assert str(Criterion.parse("x:+2.5")) == "x:+2.5" and str(Criterion.parse("x:-20%")) == "x:-20%"


def test_load_report_reads_a_folder_or_a_file_and_names_what_is_wrong(tmp_path):
    import json
    import re

    from workbench.analysis.compare import load_report

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(json.dumps(BASE))
    assert load_report(tmp_path / "run") == BASE == load_report(str(tmp_path / "run" / "report.json"))
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "partial.json").write_text('{"scenario": {}, "seed": 0}')
    for path, message in (
        (tmp_path / "nowhere", "no report found"),
        (tmp_path / "bad.json", "not valid JSON"),
        (tmp_path / "list.json", "not a workbench report (missing scenario, seed, complete, metrics)"),
        (tmp_path / "partial.json", "not a workbench report (missing complete, metrics)"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)) as error:
            load_report(path)
        assert str(error.value).startswith(str(path))


def test_the_verdict_names_each_incomplete_run_and_the_record_keeps_the_criteria():
    neither = {**BASE, "complete": False}  # an old report: no reasons given
    cut = {**report("on", output_tok_s=1.0, ttft_p99_ms=1.0), "complete": False, "incomplete_because": ["a", "b"]}
    result = compare(neither, cut, ["output_tok_s:+1%"], ["ttft_p99_ms:+1%"])
    assert result["verdict"] == "no verdict: incomplete run: baseline (incomplete), candidate (a; b)"
    assert (result["intended"], result["tolerated"]) == (["output_tok_s:+1%"], ["ttft_p99_ms:+1%"])
    assert (
        compare(BASE, BASE, [], [])["verdict"] == "no decision: no intended gain or tolerated regression was declared"
    )
    failing = compare(
        BASE, report("on", output_tok_s=1.0, ttft_p99_ms=9000.0), ["output_tok_s:+1%"], ["ttft_p99_ms:+1%"]
    )
    assert (
        failing["verdict"]
        == "reject: the 95% interval lies wholly on the wrong side of output_tok_s:+1%, ttft_p99_ms:+1%"
    )


@pytest.mark.parametrize(
    "value, criterion, kind, status",
    [
        (101.0, "output_tok_s:+0", "intended", "reached"),
        (100.0, "output_tok_s:+0", "intended", "short"),  # an exact zero change is no gain
        (99.0, "output_tok_s:+0", "intended", "short"),
        (99.0, "output_tok_s:-0", "intended", "reached"),  # the sign of zero says the direction
        (99.0, "output_tok_s:+0", "tolerated", "within"),
        (101.0, "output_tok_s:+0", "tolerated", "crossed"),
        (49.0, "output_tok_s:-50%", "intended", "reached"),
        (51.0, "output_tok_s:-50%", "intended", "short"),
    ],
)
def test_criteria_at_zero_and_at_their_boundary(value, criterion, kind, status):
    candidate = report("on", output_tok_s=value, ttft_p99_ms=800.0)
    intended, tolerated = ([criterion], []) if kind == "intended" else ([], [criterion])
    (check,) = compare(BASE, candidate, intended, tolerated)["checks"]
    assert check["status"] == status


def test_a_metric_in_one_report_only_and_a_run_without_variant():
    candidate = report(None, output_tok_s=100.0, ttft_p99_ms=800.0, new_metric=5.0)
    result = compare(BASE, candidate, ["new_metric:+1"], [])
    row = {row["metric"]: row for row in result["metrics"]}["new_metric"]
    assert (row["baseline"], row["candidate"], row["delta"], row["n_baseline"], row["n_candidate"]) == (
        None,
        5.0,
        None,
        0,
        20,
    )
    lines = format_comparison(result).splitlines()
    assert lines[1] == "candidate: s / - (seed 0)"
    assert lines[-2] == (
        "  UNCERTAIN intended  new_metric:+1                estimate - (n 0/20, 1 pair of runs); not measurable in "
        "both runs"
    )


def test_runs_of_another_model_hardware_or_workload_are_named_as_unlike():
    """SmolLM2 on this CPU against a simulated H100 printed -99.9% deltas without a word."""
    local = {
        **report("a", output_tok_s=100.0),
        "versions": {
            "model": {"path": "/m/smollm2.gguf", "files": {"smollm2.gguf": "ab" * 32}},
            "device": "CPU (2 threads)",
        },
        "scenario": {"name": "s", "engine": {"model": "smollm2-135m"}, "traffic": {"rate": 2.0}, "events": []},
    }
    same = {**local, "variant": "b"}
    assert compare(local, same, [], [])["differences"] == []
    simulated = {
        **report("b", output_tok_s=90_000.0),
        "versions": {"model": "simulated:llama-2-7b@h100-80gb"},
        "scenario": {
            "name": "s",
            "engine": {"model": "simulated:llama-2-7b@h100-80gb"},
            "traffic": {"rate": 8.0},
            "events": [],
        },
    }
    result = compare(local, simulated, [], [])
    assert result["differences"] == [
        "model: smollm2.gguf abababab vs simulated:llama-2-7b@h100-80gb",
        "hardware: CPU (2 threads) vs simulated h100-80gb",
        'workload (traffic, events, seed): [{"rate": 2.0}, [], 0] vs [{"rate": 8.0}, [], 0]',
    ]
    text = format_comparison(result).splitlines()
    assert text[2] == "warning: these runs differ in more than a configuration, so no delta isolates one change:"
    assert text[3:6] == [f"  {difference}" for difference in result["differences"]]
