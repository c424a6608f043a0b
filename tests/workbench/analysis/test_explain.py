"""`workbench explain` on constructed runs with known answers: where only one limit binds, the
waiting is attributed to it; every request's causes add up to its time from arrival to last token."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine import EngineConfig
from engine.requests.metrics import UNFINISHED
from workbench.analysis.explain import (
    CAUSES,
    attribute_traced,
    cause_of,
    explain,
    explanation_record,
    format_explanation,
)
from workbench.bench.headless import run_headless
from workbench.cli import main
from workbench.runs.run_log import read_run_log
from workbench.traffic.scenario import SLO, Scenario, ScenarioEvent

SIMULATED = "simulated:llama-3-8b@a100-80gb"


def burst_run(tmp_path, count=8, prompt_tokens=64, output_tokens=16, tag="chat", extra_events=(), **engine):
    """`count` requests arriving together on a simulated GPU, and its run log read back with traces."""
    settings = dict(model=SIMULATED, max_num_seqs=64, max_num_batched_tokens=8192, long_prompt_threshold=0)
    scenario = Scenario(
        name="burst",
        engine=EngineConfig(**{**settings, **engine}),
        traffic=None,
        events=[
            ScenarioEvent(
                at_s=0.0,
                action="inject",
                count=count,
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
                tag=tag,
            ),
            *extra_events,
        ],
        slo=SLO(ttft_ms=60_000),
    )
    run_headless(scenario, tmp_path)
    return read_run_log(tmp_path / "run.jsonl", with_traces=True)


def seconds(log, cause):
    return {time.request_id: time.seconds[list(CAUSES).index(cause)] for time in attribute_traced(log)}


def waiting_causes(log):
    """The causes of waiting with any time at all, over every request."""
    table = np.sum([time.seconds for time in attribute_traced(log)], axis=0)
    waits = {"mid_step", "max_num_seqs", "token_budget", "kv_blocks", "long_prompt_policy", "other_wait", "preempted"}
    return {cause for cause, total in zip(CAUSES, table) if cause in waits and total > 0}


def assert_causes_add_up(log):
    records = {record["request_id"]: record for record in log.requests}
    for time in attribute_traced(log):
        record = records[time.request_id]
        assert time.seconds.sum() == pytest.approx(record["finish_time"] - record["arrival_time"], abs=1e-6)
        assert (time.seconds >= -1e-9).all()


def test_a_run_where_only_max_num_seqs_binds_waits_for_slots(tmp_path):
    log = burst_run(tmp_path, count=8, max_num_seqs=2)
    assert waiting_causes(log) == {"max_num_seqs"}
    waited = seconds(log, "max_num_seqs")
    records = {record["request_id"]: record for record in log.requests}
    # Two run at once: the first pair never waits; everyone else waits exactly arrival to first scheduled.
    for request_id, record in records.items():
        queued = record["first_scheduled_time"] - record["arrival_time"]
        assert waited[request_id] == pytest.approx(queued, abs=1e-6)
    assert sum(value > 0 for value in waited.values()) == 6
    assert_causes_add_up(log)


def test_a_run_where_only_the_token_budget_binds_waits_for_it(tmp_path):
    log = burst_run(tmp_path, count=6, prompt_tokens=400, max_num_batched_tokens=512)
    assert waiting_causes(log) == {"token_budget"}
    assert_causes_add_up(log)


def test_a_run_short_of_kv_blocks_waits_for_blocks(tmp_path):
    # 16-token blocks: each request needs 5 blocks (64 + 16 tokens); 12 blocks hold two of them.
    log = burst_run(tmp_path, count=6, num_kv_blocks=12, max_model_len=128, enable_prefix_caching=False)
    causes = waiting_causes(log)
    assert "kv_blocks" in causes and causes <= {"kv_blocks", "preempted"}
    assert_causes_add_up(log)


def test_long_prompts_held_by_their_policy(tmp_path):
    log = burst_run(tmp_path, count=4, prompt_tokens=2000, long_prompt_threshold=512, max_long_prefills=1)
    assert "long_prompt_policy" in waiting_causes(log)
    assert waiting_causes(log) <= {"long_prompt_policy", "token_budget"}
    assert_causes_add_up(log)


def test_a_request_arriving_mid_step_waits_for_the_step(tmp_path):
    late = ScenarioEvent(at_s=0.001, action="inject", count=1, prompt_tokens=64, output_tokens=4, tag="late")
    log = burst_run(tmp_path, count=4, prompt_tokens=4000, extra_events=[late])
    (late_time,) = [time for time in attribute_traced(log) if time.tag == "late"]
    assert late_time.seconds[list(CAUSES).index("mid_step")] > 0
    assert_causes_add_up(log)


def test_the_tail_is_above_its_percentile_and_named_with_its_n(tmp_path):
    log = burst_run(tmp_path, count=20, max_num_seqs=4)
    explanation = explain(log, above_percentile=90)
    e2e = sorted(record["finish_time"] - record["arrival_time"] for record in log.requests)
    assert (
        explanation.everyone.n == 20
        and explanation.tail.n == sum(value >= np.percentile(e2e, 90) for value in e2e) == 4
    )
    assert explanation.tail.share_perc["max_num_seqs"] > explanation.everyone.share_perc["max_num_seqs"]
    assert sum(explanation.tail.share_perc.values()) == pytest.approx(100.0)


def test_an_incomplete_runs_tail_says_the_requests_it_leaves_out(tmp_path):
    """On a run saved mid-run, "the tail" of the finished requests said nothing of the ones still
    in flight, the slowest ones."""
    log = burst_run(tmp_path, count=20, max_num_seqs=4)
    slowest = sorted(log.requests, key=lambda record: record["finish_time"])[-5:]
    for record in slowest:  # as a run saved mid-run logs them
        record["finish_reason"] = UNFINISHED
    explanation = explain(log, above_percentile=90)
    assert (explanation.everyone.n, explanation.arrived, explanation.unfinished) == (15, 20, 5)
    assert explanation.left_out().startswith("5 of 20 requests that arrived did not finish and are left out (5 still")
    text = format_explanation(explanation, "run")
    assert "all: n = 15 finished of 20 arrived" in text and "Left out: 5 of 20" in text
    assert explanation_record(explanation)["left_out"] == explanation.left_out()
    assert explain(burst_run(tmp_path / "whole", count=4)).left_out() == ""


@pytest.mark.parametrize(
    "reason, cause",
    [
        ("max_num_seqs (32) reached", "max_num_seqs"),
        ("the step's token budget (512 tokens) is used", "token_budget"),
        ("not enough free KV blocks (3 free)", "kv_blocks"),
        ("a running request was preempted in this step: nobody is admitted", "kv_blocks"),
        ("max_long_prefills (1) long prompts already prefill", "long_prompt_policy"),
        ("the overdue long prompt 7 goes first", "long_prompt_policy"),
        ("something new", "other_wait"),
    ],
)
def test_every_reason_the_scheduler_gives_has_its_cause(reason, cause):
    assert cause_of(reason) == cause


def test_the_report_and_the_command_carry_the_explanation(tmp_path, capsys):
    burst_run(tmp_path, count=8, max_num_seqs=2)
    report = json.loads((tmp_path / "report.json").read_text())
    section = report["explain"]
    assert section["traced"] and section["all"]["n"] == 8 and "max_num_seqs" in section["all"]["causes"]
    assert main(["explain", str(tmp_path), "--above", "p50", "--json", str(tmp_path / "why.json")]) == 0
    printed = capsys.readouterr().out
    assert "waiting for a sequence slot (max_num_seqs)" in printed and "at or above p50" in printed
    # On simulated GPUs the times explained are worth what the simulator is where the run stood.
    assert all(f"  {stated['says']}" in printed for stated in report["simulated_error"].values())
    assert json.loads((tmp_path / "why.json").read_text())["above_percentile"] == 50


def test_a_run_without_traces_says_what_it_can_still_attribute(tmp_path, capsys):
    burst_run(tmp_path, count=4, max_num_seqs=2, step_trace=False)
    assert main(["explain", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "waiting (no step traces)" in printed and "Not attributable: recorded without step traces" in printed


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--above", "p100"], "expected a percentile below 100"),
        (["--above", "pxx"], "expected a number"),
        (["--tag", "nope"], "no request tagged 'nope'"),
    ],
)
def test_bad_explain_arguments_get_one_line(tmp_path, capsys, arguments, message):
    burst_run(tmp_path, count=2)
    try:
        code = main(["explain", str(tmp_path), *arguments])
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2 and message in capsys.readouterr().err


def test_explain_on_a_folder_without_a_run_log_names_it(tmp_path, capsys):
    assert main(["explain", str(tmp_path)]) == 2
    assert "no run log here" in capsys.readouterr().err


def test_explain_says_what_speculation_saved_each_request(tmp_path):
    """A draft model the target always agrees with, 3 proposals a step: 16 tokens come in one
    prefill token and steps of 4, 4, 4 and 3 (max_tokens caps the last), so 11 accepted of 11
    proposed; each saved step is priced at the request's own steps' mean time."""
    log = burst_run(
        tmp_path,
        count=4,
        speculative_method="draft",
        num_speculative_tokens=3,
        draft_acceptance_rate=1.0,
    )
    explanation = explain(log)
    summary = explanation.speculation
    assert [(request.proposed, request.accepted) for request in summary.requests] == [(11, 11)] * 4
    for request, record in zip(summary.requests, log.requests):
        times = record["token_times"]
        assert request.saved_s == pytest.approx(11 * (times[-1] - times[0]) / 4)
    text = format_explanation(explanation, "burst")
    assert "Speculation: 4 finished requests proposed 44 tokens and the model accepted 44 (100.0%)" in text
    assert "; speculation: 11 of 11 proposed accepted, at most " in text
    assert explanation_record(explanation)["speculation"]["accepted_tokens"] == 44
    assert explain(burst_run(tmp_path / "plain", count=4)).speculation is None
