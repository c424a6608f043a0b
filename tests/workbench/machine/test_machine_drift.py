"""The machine's drift between runs: probed at each headless run's start and end, and a
comparison whose machine moved more than its smallest threshold treats the move as uncertainty."""

from __future__ import annotations

import pytest

from workbench.analysis.compare import compare, format_comparison
from workbench.machine.probe import machine_drift, probe_machine


def probe(copy, matmul):
    return {"copy_gb_s": copy, "matmul_gflop_s": matmul, "method": "constructed"}


def run(ttft_ms, *probes):
    interval = {"low": ttft_ms * 0.99, "high": ttft_ms * 1.01, "standard_error": None, "method": "constructed"}
    entry = {"value": ttft_ms, "unit": "ms", "n": 100, "interval": interval, "pair_interval": interval}
    metrics = {"ttft_p50_ms": entry}
    return {
        "scenario": {"name": "s", "engine": {"model": "simulated:llama-3-8b@a100-80gb"}},  # one pair decides
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
    # Only the matmul moved (another process on the cores): still the machine's drift.
    assert machine_drift(steady, run(100.0, probe(10.0, 100.0), probe(10.0, 75.0))) == 100.0 / 75.0 - 1


def test_a_gain_no_larger_than_the_machines_drift_is_not_accepted():
    baseline = run(100.0, probe(10.0, 100.0), probe(10.0, 100.0))
    same_machine = run(90.0, probe(10.0, 100.0), probe(10.1, 100.0))
    faster_machine = run(90.0, probe(12.0, 115.0), probe(12.0, 116.0))
    assert compare(baseline, same_machine, ["ttft_p50_ms:-5%"], [])["decision"] == "accept"
    result = compare(baseline, faster_machine, ["ttft_p50_ms:-5%"], [])
    (check,) = result["checks"]
    assert result["decision"] == "inconclusive" and result["machine_drift"] == pytest.approx(0.2)
    # Widened on the ratio's scale: 89.1 / 101 / 1.2 - 1 to 90.9 / 99 * 1.2 - 1.
    assert check["interval"]["low"] == pytest.approx(89.1 / 101 / 1.2 - 1) and check["interval"]["high"] > 0
    assert "the machine's speed moved 20.0% across the runs' probes: interval widened by it" in check["note"]
    assert "machine: its speed moved 20.0% across the runs' probes (copy, matmul)" in format_comparison(result)
