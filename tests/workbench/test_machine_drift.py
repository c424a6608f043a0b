"""The machine's drift between runs: probed at each headless run's start and end, and a
comparison whose machine moved more than its smallest threshold treats the move as uncertainty."""

from __future__ import annotations

import pytest

from workbench.compare import compare, format_comparison
from workbench.machine_probe import machine_drift, probe_machine


def probe(copy, matmul):
    return {"copy_gb_s": copy, "matmul_gflop_s": matmul, "method": "constructed"}


def run(tok_s, *probes):
    interval = {"low": tok_s * 0.99, "high": tok_s * 1.01, "standard_error": tok_s * 0.005, "method": "constructed"}
    metrics = {"output_tok_s": {"value": tok_s, "unit": "output tokens/s", "n": 100, "interval": interval}}
    return {
        "scenario": {"name": "s"},
        "variant": None,
        "seed": 0,
        "complete": True,
        "metrics": metrics,
        "machine_probe": dict(zip(("start", "end"), probes)),
    }


def test_the_probe_measures_this_machine():
    measured = probe_machine()
    assert measured["copy_gb_s"] > 0 and measured["matmul_gflop_s"] > 0 and "64 MiB" in measured["method"]


def test_drift_is_the_largest_spread_of_either_measure_over_every_probe():
    steady = run(100.0, probe(10.0, 100.0), probe(10.0, 100.0))
    slowed = run(100.0, probe(10.0, 100.0), probe(8.0, 95.0))  # copy fell by a fifth during the run
    assert machine_drift(steady, steady) == 0.0
    assert machine_drift(steady, slowed) == 10.0 / 8.0 - 1
    assert machine_drift(steady, run(100.0)) is None  # a run without probes (the window's, older ones)


def test_a_gain_no_larger_than_the_machines_drift_is_not_accepted():
    baseline = run(100.0, probe(10.0, 100.0), probe(10.0, 100.0))
    same_machine = run(110.0, probe(10.0, 100.0), probe(10.1, 100.0))
    faster_machine = run(110.0, probe(12.0, 115.0), probe(12.0, 116.0))
    assert compare(baseline, same_machine, ["output_tok_s:+5%"], [])["decision"] == "accept"
    result = compare(baseline, faster_machine, ["output_tok_s:+5%"], [])
    (check,) = result["checks"]
    assert result["decision"] == "inconclusive" and result["machine_drift"] == pytest.approx(0.2)
    assert check["interval"]["low"] < 0.05 < check["interval"]["high"]
    assert "the machine's speed moved 20.0% across the runs' probes: interval widened by it" in check["note"]
    assert "machine: its speed moved 20.0% across the runs' probes (copy, matmul)" in format_comparison(result)
