"""`workbench sweep` on a simulated GPU: a setting that does not matter gives flat curves within
their intervals, one that does moves them; the rate search brackets a known answer; bad keys and
values are refused before anything runs."""

from __future__ import annotations

import csv

import pytest

from engine import ConfigError
from workbench.analysis.sweep import RATE_KEY, Vary, find_max_rate, parse_vary, plan_points, read_sweep
from workbench.cli import main

SIMULATED = ["--set", "engine.model=simulated:llama-3-8b@a100-80gb", "--set", "traffic.num_requests=150"]


def sweep(tmp_path, *arguments):
    code = main(["sweep", "--preset", "chat-steady", *SIMULATED, *arguments, "--out", str(tmp_path)])
    return code, read_sweep(tmp_path) if (tmp_path / "sweep.csv").exists() else None


def within(row, other, name):
    """other's figure inside row's interval; an end the row's n cannot bound is open."""
    low, high = row[f"{name}_low"], row[f"{name}_high"]
    return (low is None or low <= other[name]) and (high is None or other[name] <= high)


def test_a_setting_that_does_not_matter_gives_flat_curves_within_their_intervals(tmp_path):
    # The engine's seed only seeds sampling; chat-steady samples greedily.
    code, result = sweep(tmp_path, "--vary", "engine.seed=0,1,2", "--no-plots")
    assert code == 0 and [row["engine.seed"] for row in result.rows] == ["0", "1", "2"]
    first = result.rows[0]
    for row in result.rows[1:]:
        for name in ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms", "goodput_perc"):
            assert within(first, row, name) and within(row, first, name), (name, row)
        assert row["output_tok_s"] == pytest.approx(first["output_tok_s"], rel=0.01)


def test_a_setting_that_matters_moves_the_curve_and_every_point_is_a_run(tmp_path):
    code, result = sweep(tmp_path, "--vary", "engine.max_num_seqs=1,16", "--rates", "8,16")
    assert code == 0 and len(result.rows) == 4
    assert [(row["engine.max_num_seqs"], row[RATE_KEY]) for row in result.rows] == [
        ("1", "8"),
        ("1", "16"),
        ("16", "8"),
        ("16", "16"),
    ]
    one, sixteen = result.rows[1], result.rows[3]  # at 16 req/s
    assert sixteen["output_tok_s"] > 3 * one["output_tok_s"]
    assert sixteen["ttft_p50_ms_high"] < one["ttft_p50_ms_low"]
    assert sixteen["ttft_p99_ms_high"] is None  # 150 requests bound no p99 (368 would)
    for row in result.rows:
        assert (tmp_path / row["folder"] / "report.json").exists() and row["complete"]
    assert (tmp_path / "throughput_vs_latency.png").stat().st_size > 10_000
    assert (tmp_path / "goodput_vs_rate.png").stat().st_size > 10_000


def test_the_rate_search_brackets_a_known_answer():
    tried = []

    def run_at(rate):
        tried.append(rate)
        return {"metrics": {"goodput_perc": {"value": 100.0 if rate <= 7.3 else 40.0, "interval": None}}}

    result = find_max_rate(run_at, start_rate=2.0, target_perc=90, tolerance=0.05)
    assert result.meets.rate <= 7.3 < result.misses.rate <= result.meets.rate * 1.05
    assert tried[:3] == [2.0, 4.0, 8.0]  # doubling until one misses, then bisecting
    assert "highest arrival rate with at least 90% of arrived requests meeting every SLO" in result.describe()
    never = find_max_rate(lambda rate: {"metrics": {"goodput_perc": {"value": 0.0}}}, 1.0, max_runs=4)
    assert never.meets is None and "no rate tried meets" in never.describe()


def test_find_max_rate_on_the_simulated_gpu_prints_its_bracket(tmp_path, capsys):
    code = main(
        ["sweep", "--preset", "chat-steady", *SIMULATED, "--find-max-rate", "--tolerance", "0.5", "--no-plots"]
        + ["--out", str(tmp_path)]
    )
    printed = capsys.readouterr().out
    assert code == 0 and "bracket:" in printed and "meets" in printed and "misses" in printed
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert len(rows) >= 3 and all(row[RATE_KEY] for row in rows)


def test_a_grid_runs_every_combination_the_last_setting_fastest():
    points = plan_points([parse_vary("engine.max_num_seqs=8,16"), parse_vary("engine.block_size=16,32")], [2.0])
    assert [point.settings for point in points] == [
        {"engine.max_num_seqs": "8", "engine.block_size": "16", RATE_KEY: "2"},
        {"engine.max_num_seqs": "8", "engine.block_size": "32", RATE_KEY: "2"},
        {"engine.max_num_seqs": "16", "engine.block_size": "16", RATE_KEY: "2"},
        {"engine.max_num_seqs": "16", "engine.block_size": "32", RATE_KEY: "2"},
    ]
    assert points[0].folder == "point-01" and points[0].label() == "max_num_seqs=8, block_size=16, rate=2"
    assert parse_vary("engine.max_num_seqs = 8, 16") == Vary("engine.max_num_seqs", ("8", "16"))


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--vary", "engine.max_num_seq=8,16"], "max_num_seq"),
        (["--vary", "engine.max_num_seqs=eight,16"], "max_num_seqs"),
        (["--vary", "engine.max_num_seqs"], "expected KEY=v1,v2"),
        (["--vary", "engine.max_num_seqs=8,,16"], "expected KEY=v1,v2"),
        (["--rates", "4,fast"], "--rates: expected requests/s of at least 0.000277778 (one an hour), got 'fast'"),
        (["--rates", "0"], "--rates: expected requests/s of at least"),
        (["--rates", "1e-300"], "--rates: expected requests/s of at least"),  # ran 8 minutes, a header only
        # Refused after --out was made, or not at all: a target past 100%, and a search over a
        # combination (closed loop) that has no rate, where only the first combination was checked.
        (["--find-max-rate", "--goodput-target", "150"], "--goodput-target: expected a percentage in (0, 100]"),
        (["--find-max-rate", "--vary", "traffic.arrival=poisson,closed_loop"], "closed-loop traffic has no rate"),
        ([], "nothing to sweep"),
        (["--find-max-rate", "--rates", "2,4"], "--find-max-rate searches the rate itself"),
        (["--vary", "engine.max_num_seqs=8", "--vary", "engine.max_num_seqs=16"], "each key once"),
    ],
)
def test_bad_sweeps_are_refused_before_anything_runs(tmp_path, capsys, arguments, message):
    code = main(["sweep", "--preset", "chat-steady", *SIMULATED, *arguments, "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert code == 2 and message in error and "Traceback" not in error
    assert not (tmp_path / "out").exists()


def test_find_max_rate_needs_a_rate_and_slos(tmp_path, capsys):
    preset = tmp_path / "no-slo.toml"
    preset.write_text(
        'name = "no-slo"\n[engine]\nmodel = "simulated:llama-3-8b@a100-80gb"\n[traffic]\nnum_requests = 5\n'
    )
    assert main(["sweep", "--preset", str(preset), "--find-max-rate", "--out", str(tmp_path / "out")]) == 2
    assert "the preset has no [slo]" in capsys.readouterr().err
    assert main(["sweep", "--preset", "azure-conv", "--find-max-rate", "--out", str(tmp_path / "out")]) == 2
    assert "a trace's pace is traffic.time_scale" in capsys.readouterr().err


def test_a_file_that_is_not_a_sweep_is_named(tmp_path):
    with pytest.raises(ConfigError, match="no sweep here"):
        read_sweep(tmp_path)
    (tmp_path / "sweep.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="not a workbench sweep"):
        read_sweep(tmp_path)
