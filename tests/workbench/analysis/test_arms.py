"""A preset's two arms side by side (workbench/analysis/arms.py), from the folders `workbench bench` writes,
on the tiny model: the figures with n, memory by part, KV capacity and why it changed, quality
from the ledger, and the verdict."""

from __future__ import annotations

import json

import pytest

from engine.errors import ConfigError
from tests.workbench.tiny_runs import arms_preset
from workbench.analysis.arms import read_arms
from workbench.cli import main
from workbench.quality.ledger import configuration_key, record


@pytest.fixture
def arms_folder(tmp_path, tiny_llama):
    directory, _ = tiny_llama
    out = tmp_path / "out"
    assert main(["bench", "--preset", arms_preset(tmp_path, directory), "--out", str(out), "--no-plots"]) == 0
    return out


def test_the_arms_side_by_side_with_why_the_kv_capacity_changed_and_the_verdict(arms_folder, tiny_llama):
    directory, _ = tiny_llama
    arms = read_arms(arms_folder)
    assert (arms.baseline, arms.candidate) == ("plain", "int8")
    rows = {row.what: row for row in arms.rows}
    assert rows["TPOT p50 (ms/token)"].baseline.endswith("(n=6)") and rows["TTFT p99 (ms)"].candidate.endswith("(n=6)")
    reports = {name: json.loads((arms_folder / name / "report.json").read_text()) for name in ("plain", "int8")}
    engines = {name: report["engine"] for name, report in reports.items()}
    assert rows["KV capacity (tokens)"].baseline == f"{engines['plain']['kv_capacity_tokens']:,}"
    assert engines["int8"]["kv_capacity_tokens"] == 2 * engines["plain"]["kv_capacity_tokens"]
    assert rows["KV capacity (tokens)"].change == "+100.0%"
    assert any(what.startswith("weights: int8") for what in rows)  # memory by part
    assert arms.kv_capacity_why == (
        f"KV capacity: {engines['plain']['kv_capacity_tokens']:,} vs {engines['int8']['kv_capacity_tokens']:,} tokens "
        "= "
        f"cache bytes / bytes per token, and a token takes {engines['plain']['kv_bytes_per_token']:,} vs "
        f"{engines['int8']['kv_bytes_per_token']:,} bytes (keys and values of every layer): the cache holds float32 "
        "(kv_cache_dtype auto: the compute dtype) vs bfloat16 (engine.kv_cache_dtype)."
    )
    assert rows["quality vs the file's own weights"].baseline.startswith("exact")
    assert rows["quality vs the file's own weights"].candidate == "not measured: workbench quality --quant int8"
    # 6 of 6 requests met the SLOs in each arm: that cannot show a 10-point gain, nor rule it out.
    assert arms.verdict.startswith(
        "inconclusive: undecided: goodput_perc:+10 (one pair of runs on a real machine: its interval covers the "
        "requests' noise, not the runs'"
    )
    assert arms.checks[0].startswith("UNCERTAIN intended  goodput_perc:+10             estimate +0pp [95% -")
    assert "(n 6/6, 1 pair of runs" in arms.checks[0] and "Newcombe" not in arms.checks[0]
    assert " tolerated ttft_p99_ms:+1000%" in arms.checks[1]  # within, or uncertain if the machine drifted
    versions = reports["int8"]["versions"]  # a measured cost comes from the ledger, with its n
    record(
        str(directory),
        {
            configuration_key(versions["quantization"], versions["dtype"], versions["kv_cache_dtype"]): {
                "perplexity_change_perc": 0.8,
                "kl_divergence_mean_nats": 0.002,
                "top1_agreement_perc": 97.5,
                "evaluated_tokens": 300,
            }
        },
    )
    assert {row.what: row for row in read_arms(arms_folder).rows}["quality vs the file's own weights"].candidate == (
        "perplexity +0.80%, top-1 agreement 97.5% (n=300 tokens)"
    )


def test_a_folder_without_two_arms_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="expected a sub-folder per variant, each with a report.json .* found 0"):
        read_arms(tmp_path)
