"""A simulated deployment of several instances run headless (workbench/backends/deployment.py):
the Azure trace on colocated and disaggregated instances, the decision between them, where each
request ran, and `explain`'s causes of a disaggregated run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import EngineConfig
from engine.errors import ConfigError
from workbench.analysis.explain import explain
from workbench.backends.loader import BackendLoader
from workbench.cli import main
from workbench.runs.run_log import read_run_log
from workbench.traffic.presets import load_preset

CONV_TRACE = Path(__file__).parents[3] / "presets" / "traces" / "azure-llm-inference-2023" / "conv.csv"


def test_the_azure_presets_compare_colocated_and_disaggregated_instances_on_the_same_gpus():
    for preset in ("azure-conv", "azure-code"):
        scenario = load_preset(preset)
        assert (scenario.decision.baseline, scenario.decision.candidate) == ("colocated", "disaggregated")
        colocated, disaggregated = (load_preset(preset, [], arm).engine for arm in ("colocated", "disaggregated"))
        assert colocated.model == disaggregated.model == "simulated:llama-3-70b@8xh100-80gb"
        assert (colocated.data_parallel_size, colocated.prefill_instances) == (2, 0)
        assert (disaggregated.data_parallel_size, disaggregated.prefill_instances) == (2, 1)


def test_a_disaggregated_bench_logs_each_requests_route_and_explain_names_its_waits(tmp_path):
    arms = "\n".join(
        f"""
[variants.{name}]
engine = {{ data_parallel_size = 2, prefill_instances = {prefill} }}"""
        for name, prefill in (("colocated", 0), ("disaggregated", 1))
    )
    preset = tmp_path / "two-h100s.toml"
    preset.write_text(
        f"""name = "two-h100s"
seed = 0
[engine]
model = "simulated:llama-3-8b@2xh100-80gb"
max_num_batched_tokens = 2048
[traffic]
prompts = "trace"
trace_file = "{CONV_TRACE}"
num_requests = 300
time_scale = 0.05
tag = "conv"
[slo]
ttft_ms = 2000
tpot_ms = 100
{arms}
[decision]
baseline = "colocated"
candidate = "disaggregated"
intended = ["ttft_p99_ms:-20%"]
tolerated = ["tpot_p99_ms:+10%"]
"""
    )
    out = tmp_path / "out"
    assert main(["bench", "--preset", str(preset), "--out", str(out), "--no-plots"]) == 0
    comparison = json.loads((out / "comparison.json").read_text())
    assert (comparison["intended"], comparison["tolerated"]) == (["ttft_p99_ms:-20%"], ["tpot_p99_ms:+10%"])
    # Simulated: the same settings give the same figures, so one pair of runs is judged (a p99 of
    # 300 requests has no upper bound, so the terms stay open, and the verdict says that).
    assert "one pair of runs on a real machine" not in comparison["verdict"]

    colocated = read_run_log(out / "colocated" / "run.jsonl", with_traces=True)
    assert colocated.header["backend"]["name"] == "in-process deployment: 2 instances, each prefill and decode"
    assert {record["instance"] for record in colocated.requests} == {0, 1}
    assert all(record["kv_ready_time"] is None for record in colocated.requests)

    log = read_run_log(out / "disaggregated" / "run.jsonl", with_traces=True)
    assert log.header["engine"]["instances"] == ["prefill", "decode"]
    finished = [record for record in log.requests if record["finish_reason"] == "length"]
    assert len(finished) == 300
    for record in finished:
        assert record["prefill_instance"] == 0 and record["instance"] == 1
        first_token = record["first_token_time"]
        assert first_token <= record["kv_transfer_start_time"] < record["kv_ready_time"]
        assert record["kv_ready_time"] <= record["decode_scheduled_time"] <= record["token_times"][1]
        assert record["arrival_time"] <= record["first_scheduled_time"] <= first_token
    report = json.loads((out / "disaggregated" / "report.json").read_text())
    assert report["complete"] and report["metrics"]["requests_finished"]["value"] == 300

    # Replaying the colocated run on the split reproduces the disaggregated run, figure for figure.
    replayed = tmp_path / "replayed"
    assert main(["replay", str(out / "colocated"), "--set", "engine.prefill_instances=1", "--out", str(replayed)]) == 0
    replay_report = json.loads((replayed / "report.json").read_text())
    for metric in ("ttft_p99_ms", "tpot_p99_ms", "e2e_p50_ms"):
        assert replay_report["metrics"][metric]["value"] == report["metrics"][metric]["value"]

    explanation = explain(log)
    causes = explanation.everyone.share_perc
    assert {"prefill_instance_wait", "prefill", "kv_transfer", "decode"} <= set(causes)
    assert sum(causes.values()) == pytest.approx(100.0)
    assert explanation.not_attributable.startswith("recorded without step traces")  # in process, not a server


def test_the_window_refuses_a_deployment_in_one_line():
    config = EngineConfig(model="simulated:llama-3-8b@2xh100-80gb", data_parallel_size=2, prefill_instances=1)
    with pytest.raises(ConfigError, match="data_parallel_size = 2, prefill_instances = 1: .* runs headless"):
        BackendLoader().load(config, lambda stage, fraction: None)
