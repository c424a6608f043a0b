"""`workbench bench` and `workbench compare` end to end on a tiny model, PNG plots included."""

from __future__ import annotations

import json
import re

import pytest
from PySide6.QtGui import QImage

from tests.workbench.images import distinct_colours
from workbench.cli import main
from workbench.gui.charts.report_images import export_plot_images
from workbench.runs.run_log import RunLog, read_run_log


def pixels_unlike(path, empty_path, skip_top: int = 60) -> int:
    """Pixels that differ from the same plot drawn with no data, below its title (sampled 1 in 4)."""
    image, empty = QImage(str(path)), QImage(str(empty_path))
    width, height = min(image.width(), empty.width()), min(image.height(), empty.height())
    return 4 * sum(
        1 for x in range(0, width, 2) for y in range(skip_top, height, 2) if image.pixel(x, y) != empty.pixel(x, y)
    )


# A simulated GPU, whose clock advances by the cost model: the decision below compares TTFTs, and on
# the wall clock of a loaded machine one stalled step of the tiny real model once reversed it. The
# GPU alone (the "ideal" stack): under vLLM 0.6's the change reads -50% too, but a step that admits
# requests pays 20 ms for each, the chats' TTFTs spread, and 12 of them no longer bound it away from 0.
PRESET = """
name = "sim-isolation"
description = "A long prompt and short chats on a simulated GPU."
seed = 1

[engine]
model = "simulated:llama-2-7b@h100-80gb"
max_model_len = 512
serving_stack = "ideal"
num_kv_blocks = 256
block_size = 4
max_num_batched_tokens = 64

[[events]]
at_s = 0.0
action = "inject"
count = 1
prompt_tokens = 300
output_tokens = 4
tag = "long"

[[events]]
at_s = 0.0
action = "inject"
count = 12
prompt_tokens = 8
output_tokens = 6
tag = "chat"

[slo]
ttft_ms = 60000

[variants.admission-off]
engine = { long_prompt_threshold = 0 }

[variants.admission-on]
engine = { long_prompt_threshold = 32 }

[decision]
baseline = "admission-off"
candidate = "admission-on"
intended = ["chat/ttft_p50_ms:-1%"]
tolerated = ["requests_finished:+0"]
"""


def test_bench_runs_every_variant_writes_files_and_compares(tmp_path, capsys):
    preset = tmp_path / "sim.toml"
    preset.write_text(PRESET)
    out = tmp_path / "runs"
    assert main(["bench", "--preset", str(preset), "--out", str(out), "--set", "engine.max_num_seqs=16"]) == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    log = read_run_log(out / "admission-on" / "run.jsonl")
    export_plot_images(RunLog(log.header, [], [], None), empty)  # the same plots with no data
    for variant in ("admission-off", "admission-on"):
        folder = out / variant
        report = json.loads((folder / "report.json").read_text())
        assert report["variant"] == variant and report["scenario"]["engine"]["max_num_seqs"] == 16
        assert report["complete"] and report["metrics"]["requests_finished"]["value"] == 13
        for name in ("kv_occupancy", "queue_depth", "latency", "throughput", "batch_composition"):
            assert distinct_colours(folder / f"{name}.png")[0] >= 1000
            # Curves and points cover thousands of pixels (8,000 to 20,000 here, with 2-pixel lines
            # and no grid); a plot with no data differs only in its ticks.
            assert pixels_unlike(folder / f"{name}.png", empty / f"{name}.png") > 5_000, name
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["baseline"]["variant"] == "admission-off" and len(comparison["checks"]) == 2
    # Twelve chats (at least MIN_SUBGROUP_REQUESTS, and enough to bound a median): their TTFT
    # interval is judged; the count of finished requests has no interval within a run, so the
    # tolerated term stays open.
    assert [check["status"] for check in comparison["checks"]] == ["reached", "uncertain"]
    assert comparison["verdict"] == (
        "accept: every intended change reached (95% interval wholly past it), no tolerated bound crossed; cannot "
        "yet rule out crossing requests_finished:+0 (no interval for a change of this figure over one pair of runs: "
        "repeat the runs (--repeat))"
    )
    printed = capsys.readouterr().out
    assert "decision record:" in printed and "verdict: accept" in printed

    assert (
        main(["compare", str(out / "admission-off"), str(out / "admission-on"), "--intended", "output_tok_s:+1000%"])
        == 0
    )
    assert "verdict: inconclusive: undecided: output_tok_s:+1000% (no interval for a change of this figure" in (
        capsys.readouterr().out
    )


def test_bench_repeats_interleave_the_variants_and_judge_the_paired_repeats(tmp_path, capsys):
    preset = tmp_path / "sim.toml"
    preset.write_text(PRESET)
    out = tmp_path / "runs"
    assert main(["bench", "--preset", str(preset), "--out", str(out), "--repeat", "3", "--no-plots"]) == 0
    printed = capsys.readouterr()
    started = [line for line in printed.err.splitlines() if line.startswith("running ")]
    # Each run's summary gives every latency figure with its n and its interval within the run.
    assert any(line.startswith("  ttft_p99_ms") and "(n=13, 95% " in line for line in printed.out.splitlines())
    assert [line.split(" -> ")[0].removeprefix("running sim-isolation / ") for line in started] == [
        f"{variant} (repeat {repeat} of 3, seed {repeat})"  # the preset's seed is 1
        for repeat in (1, 2, 3)
        for variant in (("admission-off", "admission-on") if repeat != 2 else ("admission-on", "admission-off"))
    ]
    for repeat in (1, 2, 3):
        report = json.loads((out / f"repeat-{repeat}" / "admission-on" / "report.json").read_text())
        assert report["seed"] == repeat and report["complete"]
        assert report["machine_probe"] == {}  # a simulated GPU: this machine's speed does not time it
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["repeats"] == 3 and comparison["baseline"]["seed"] == [1, 2, 3]
    (chats, finished) = comparison["checks"]
    assert chats["runs"] == 3 and chats["interval"]["method"] == "Student's t over 3 paired repeats of the log ratio"
    assert chats["status"] == "reached" and finished["status"] == "within"  # the simulator repeats itself exactly
    rows = {row["metric"]: row for row in comparison["metrics"]}
    assert rows["requests_finished"]["n_baseline"] == 3 * 13 and rows["requests_finished"]["baseline"] == 13
    assert "3 repeats of each" in (out / "comparison.txt").read_text()


def test_repeat_schedules_interleave_shuffle_by_seed_and_can_keep_one_traffic_seed():
    from workbench.cli.bench import repeat_schedule

    assert repeat_schedule(["a", "b"], 3, seed=5) == [  # counterbalanced: A B, B A, A B
        (1, "a", 5),
        (1, "b", 5),
        (2, "b", 6),
        (2, "a", 6),
        (3, "a", 7),
        (3, "b", 7),
    ]
    assert [seed for _, _, seed in repeat_schedule(["a", "b"], 3, seed=5, same_traffic=True)] == [5] * 6
    shuffled = repeat_schedule(list("abcd"), 4, seed=1, shuffle=True)
    orders = ["".join(variant for repeat, variant, _ in shuffled if repeat == r) for r in (1, 2, 3, 4)]
    assert all(sorted(order) == list("abcd") for order in orders) and len(set(orders)) > 1
    assert shuffled == repeat_schedule(list("abcd"), 4, seed=1, shuffle=True)  # the same seed, the same order


def test_repeat_zero_is_refused_with_the_value(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--preset", "chat-burst", "--out", str(tmp_path), "--repeat", "0"])
    assert "argument --repeat: expected at least 1, got 0" in capsys.readouterr().err


def test_bad_preset_gives_one_line_and_exit_code_2(tmp_path, capsys):
    preset = tmp_path / "bad.toml"
    preset.write_text('name = "bad"\n[traffic]\narrival = "sometimes"\n')
    assert main(["bench", "--preset", str(preset), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("workbench: ") and "bad.toml: traffic: arrival: expected one of poisson" in error
    assert "Traceback" not in error


def test_ctrl_c_stops_a_bench_of_variants_after_writing_the_partial_report(tmp_path, monkeypatch, capsys):
    """It stopped only the variant running, then started the next."""
    from workbench.runs.runner import ScenarioRunner

    preset = tmp_path / "sim.toml"
    preset.write_text(PRESET)
    tick, ticks = ScenarioRunner.tick, iter(range(1_000_000))

    def interrupted_at_tick_3(runner):
        if next(ticks) == 3:
            raise KeyboardInterrupt
        return tick(runner)

    monkeypatch.setattr(ScenarioRunner, "tick", interrupted_at_tick_3)
    assert main(["bench", "--preset", str(preset), "--out", str(tmp_path / "runs"), "--no-plots"]) == 130
    assert "interrupted; the partial report of sim-isolation / admission-off is in" in capsys.readouterr().err
    assert not json.loads((tmp_path / "runs" / "admission-off" / "report.json").read_text())["complete"]
    assert not (tmp_path / "runs" / "admission-on").exists()


def test_ctrl_c_in_any_command_is_one_line(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("workbench.cli.presets_list.run", interrupted)
    assert main(["presets"]) == 130
    assert capsys.readouterr().err == "workbench: interrupted\n"


@pytest.mark.parametrize("repeats, decision", [(1, "inconclusive"), (3, "reject")])
def test_the_a_a_preset_on_a_deterministic_simulated_gpu_never_accepts(tmp_path, repeats, decision):
    """Both arms are equal to the last digit: one pair's intervals hold 0 (inconclusive); over
    repeats every paired change is exactly 0, and a zero change is no gain (it was "REACHED
    intended tpot_p50_ms:-0% ... accept" before)."""
    out = tmp_path / "aa"
    arguments = ["bench", "--preset", "same-twice", "--set", "engine.model=simulated:llama-3-8b@a100-80gb"]
    assert main([*arguments, "--repeat", str(repeats), "--no-plots", "--out", str(out)]) == 0
    comparison = json.loads((out / "comparison.json").read_text())
    (check,) = comparison["checks"]
    assert comparison["decision"] == decision and check["estimate"] == 0.0
    assert check["status"] == ("uncertain" if repeats == 1 else "short")
    if repeats > 1:
        assert (check["interval"]["low"], check["interval"]["high"]) == (0.0, 0.0)


def test_the_usage_in_the_cli_docstring_names_every_command():
    """Issue 49 #6: the usage list had fallen four commands behind the parser."""
    import argparse

    import workbench.cli as cli

    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    for command in cli.COMMANDS:
        command.add_to(commands)
    named = set(re.findall(r"workbench ([a-z-]+)", cli.__doc__)) | set(re.findall(r"\| ([a-z-]+)", cli.__doc__))
    assert set(commands.choices) - named == set()
