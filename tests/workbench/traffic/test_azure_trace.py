"""The Azure LLM inference trace ships with the project and its presets replay it headless: the
recorded arrivals and lengths, a window of them, and the count of requests cut to the context."""

from __future__ import annotations

import csv
import json

import pytest

from workbench.cli import main
from workbench.runs.run_log import read_run_log
from workbench.traffic.presets import PRESET_DIR, load_preset

TRACE_DIR = PRESET_DIR / "traces" / "azure-llm-inference-2023"


def first_rows(name: str, count: int) -> list[dict]:
    with (TRACE_DIR / f"{name}.csv").open(newline="") as handle:
        return [row for _, row in zip(range(count), csv.DictReader(handle))]


def test_the_trace_ships_with_its_attribution_and_licence():
    assert (
        "Azure LLM inference trace 2023 (Azure Public Dataset), via Microsoft Vidur (MIT)"
        in (TRACE_DIR / "README.md").read_text()
    )
    assert "MIT License" in (TRACE_DIR / "LICENSE-vidur").read_text()
    for name, rows in (("conv", 19_366), ("code", 8_819)):
        with (TRACE_DIR / f"{name}.csv").open() as handle:
            assert sum(1 for _ in handle) == rows + 1  # the header
        preset = load_preset(f"azure-{name}")
        assert preset.traffic.trace_file == str(TRACE_DIR / f"{name}.csv")  # relative to the preset's folder


@pytest.mark.parametrize("name", ["conv", "code"])
def test_an_azure_preset_replays_the_recorded_requests_on_a_simulated_a100(tmp_path, name):
    code = main(
        ["bench", "--preset", f"azure-{name}", "--variant", "a100", "--set", "traffic.num_requests=30"]
        + ["--out", str(tmp_path), "--no-plots"]
    )
    report = json.loads((tmp_path / "report.json").read_text())
    log = read_run_log(tmp_path / "run.jsonl")
    sent = sorted(log.requests, key=lambda record: record["arrival_time"])
    start, expected = log.header["start_time"], first_rows(name, 30)
    assert (
        code == 0 and report["complete"] and report["scenario"]["engine"]["model"] == "simulated:llama-3-8b@a100-80gb"
    )
    assert [(record["num_prompt_tokens"], len(record["token_times"])) for record in sent] == [
        (int(row["num_prefill_tokens"]), int(row["num_decode_tokens"])) for row in expected
    ]
    assert [record["arrival_time"] - start for record in sent] == pytest.approx(
        [float(row["arrived_at"]) for row in expected], abs=1e-9
    )
    assert report["metrics"]["requests_clipped"] == {
        "value": 0,
        "unit": "requests cut to the context of 8192 tokens",
        "n": 30,
        "interval": None,
    }


def test_a_shorter_context_clips_the_longest_conversations_and_says_how_many(tmp_path):
    code = main(
        ["bench", "--preset", "azure-conv", "--variant", "a100", "--set", "engine.max_model_len=1024"]
        + ["--set", "traffic.num_requests=100", "--out", str(tmp_path), "--no-plots"]
    )
    clipped = sum(
        int(row["num_prefill_tokens"]) + int(row["num_decode_tokens"]) > 1024 for row in first_rows("conv", 100)
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert code == 0 and clipped > 10
    assert report["metrics"]["requests_clipped"]["value"] == clipped


@pytest.mark.slow
def test_the_bundled_variant_replays_the_trace_scaled_down_on_the_real_model(tmp_path):
    code = main(
        ["bench", "--preset", "azure-code", "--variant", "bundled", "--set", "traffic.num_requests=2"]
        + ["--set", "engine.compile_decode=off", "--out", str(tmp_path), "--no-plots"]
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert code == 0 and report["complete"] and report["scenario"]["engine"]["model"] == "smollm2-135m"
    assert report["metrics"]["requests_finished"]["value"] == 2
