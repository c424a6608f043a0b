"""The simulator's error end to end (workbench/analysis/fidelity.py, issue 50 #3): the errors and
their summary against figures worked by hand, where a run's time went, and `workbench calibrate
--held-out` on the real engine and its calibrated simulator."""

from __future__ import annotations

import json

import pytest

from engine.simulation.catalogue import hardware_profile
from workbench.analysis.calibration import STEP_FIT_RUNS
from workbench.analysis.fidelity import figure_errors, step_terms, summarise
from workbench.cli import main
from workbench.runs.run_log import RunLog


def report(ttft_p50: float, tpot_p50: float, ttft_p99: float, tpot_p99: float, tok_s: float, n: int = 40) -> dict:
    values = dict(ttft_p50_ms=ttft_p50, tpot_p50_ms=tpot_p50, ttft_p99_ms=ttft_p99, tpot_p99_ms=tpot_p99)
    return {"metrics": {name: {"value": value, "n": n} for name, value in {**values, "output_tok_s": tok_s}.items()}}


def test_errors_and_their_medians_by_hand():
    errors = figure_errors("a", report(100, 20, 400, 30, 50), report(109, 19, 460, 30, 55))
    errors += figure_errors("b", report(200, 10, 800, 40, 80), report(180, 10.5, 800, 44, 72))
    by_figure = {(error.workload, error.metric): error.error_perc for error in errors}
    assert by_figure[("a", "ttft_p50_ms")] == pytest.approx(9.0)
    assert by_figure[("a", "tpot_p50_ms")] == pytest.approx(-5.0)
    assert by_figure[("b", "ttft_p50_ms")] == pytest.approx(-10.0)
    assert by_figure[("b", "tpot_p50_ms")] == pytest.approx(5.0)
    summary = {each.kind: each for each in summarise(errors)}
    # p50: |9|, |-5|, |-10|, |5| -> median 7.0, within 9%; p99: |15|, 0, 0, |10| -> median 5.0
    assert (summary["p50"].median_abs_error_perc, summary["p50"].figures, summary["p50"].met) == (
        pytest.approx(7.0),
        4,
        True,
    )
    assert summary["p99"].median_abs_error_perc == pytest.approx(5.0) and summary["p99"].met
    assert summary["throughput"].median_abs_error_perc == pytest.approx(10.0) and summary["throughput"].met is None


def step(end: float, duration: float, prefill: int, running: int) -> dict:
    return {
        "time_s": end,
        "step_duration_s": duration,
        "prefill_tokens": prefill,
        "num_running": running,
        "num_waiting": 0,
        "num_waiting_long": 0,
    }


def test_where_the_time_went_by_hand():
    # Real: a prefill step 0-0.10, a gap of 0.02, decode 0.12-0.15, a gap of 0.01, decode
    # 0.16-0.19 after which nothing runs, then an idle gap that is not counted.
    real = RunLog(
        {}, [step(0.10, 0.10, 64, 1), step(0.15, 0.03, 0, 1), step(0.19, 0.03, 0, 0), step(5.0, 0.1, 8, 0)], [], None
    )
    simulated = RunLog({}, [step(0.08, 0.08, 64, 1), step(0.105, 0.025, 0, 1)], [], None)
    terms = {term.name: term for term in step_terms(real, simulated)}
    assert (terms["steps with prefill"].real_s, terms["steps with prefill"].real_steps) == (pytest.approx(0.2), 2)
    assert terms["decode-only steps"].real_s == pytest.approx(0.06)
    assert terms["decode-only steps"].error_perc == pytest.approx(100 * (0.025 / 0.06 - 1))
    between = terms["between steps, requests in flight"]
    assert (between.real_s, between.real_steps, between.simulated_s) == (pytest.approx(0.03), 2, pytest.approx(0.0))


@pytest.mark.slow
def test_calibrate_held_out_runs_the_real_engine_and_its_simulator(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))  # the profile it saves stays here
    out = tmp_path / "fidelity"
    assert main(["calibrate", "--held-out", str(out), "--presets", "kv-pressure", "--requests", "6"]) == 0
    fidelity = json.loads((out / "fidelity.json").read_text())
    assert fidelity["simulated"] == "simulated:smollm2-135m@this-machine-calibrated"
    real = json.loads((out / "kv-pressure" / "real" / "report.json").read_text())
    simulated = json.loads((out / "kv-pressure" / "simulated" / "report.json").read_text())
    assert real["scenario"]["engine"]["model"] == "smollm2-135m"
    assert simulated["scenario"]["engine"]["model"] == fidelity["simulated"]
    for figure in fidelity["figures"]:  # each error is the two reports' figures, with the real run's n
        metric = figure["metric"]
        assert figure["n"] == real["metrics"][metric]["n"] == 6
        assert figure["error_perc"] == pytest.approx(
            100 * (simulated["metrics"][metric]["value"] / real["metrics"][metric]["value"] - 1)
        )
    assert "| kv-pressure | ttft_p50_ms |" in (out / "fidelity.md").read_text()
    # The step factors came from the step-fit runs' own steps, kept beside the held-out runs.
    for name, _, _ in STEP_FIT_RUNS:
        assert (
            json.loads((out / "step-fit" / name / "report.json").read_text())["metrics"]["requests_finished"]["value"]
            == 6
        )
    profile = hardware_profile("this-machine-calibrated")
    assert profile.decode_scale_by_rows and all(0.3 < scale < 3 for scale in profile.decode_scale_by_rows)
    assert main(["calibrate", "--held-out", str(out), "--presets", "chat"]) == 2  # not held out: one line
