"""Step traces in the run log: written by a headless run, read back whole, printed by
`workbench trace`, kept small as summaries, and absent (with a clear message) in old logs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine import SamplingParams
from tests.tiny_models import tiny_engine
from tests.workbench.tiny_runs import tiny_scenario
from workbench.bench.headless import run_headless
from workbench.cli import main
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.step_traces.block_replay import BlockReplay
from workbench.step_traces.log import read_trace, trace_record
from workbench.step_traces.text import format_request, request_events


@pytest.fixture(scope="module")
def traced_run(tiny_llama, tmp_path_factory):
    """A tiny run whose cache is small enough to preempt."""
    directory, _ = tiny_llama
    out = tmp_path_factory.mktemp("traced")
    run_headless(dataclasses.replace(tiny_scenario(directory, num_kv_blocks=24), trace="full"), out)
    return out, read_run_log(out / RUN_LOG_NAME, with_traces=True)


def test_every_step_has_a_trace_that_reads_back_as_written(traced_run):
    out, log = traced_run
    assert (
        len(log.traces) == len(log.steps) > 0
        and log.header["trace"] == "full"
        and log.footer["traces_full"] == len(log.traces)
    )
    assert read_run_log(out / RUN_LOG_NAME).traces == []  # reports and plots skip them unparsed
    for record in log.traces:
        assert trace_record(read_trace(record), full=True) == record and record["full"]
    # The per-step statistics and the trace agree on what the step did and left.
    for stats, record in zip(log.steps, log.traces):
        trace = read_trace(record)
        assert stats["kv_blocks_used"] == trace.kv_after.used_blocks
        assert stats["prefill_tokens"] == sum(row.end - row.start for row in trace.rows if row.kind == "prefill")
        assert stats["decode_tokens"] == sum(row.kind == "decode" for row in trace.rows)
    assert sum(len(record["preemptions"]) for record in log.traces) == log.steps[-1]["preemptions_total"] > 0


def test_a_summary_counts_decode_rows_and_still_replays_the_block_map(traced_run):
    _, log = traced_run
    full, summary = BlockReplay(24), BlockReplay(24)
    for record in log.traces:
        trace = read_trace(record)
        shortened = read_trace(json.loads(json.dumps(trace_record(trace, full=False))))
        assert shortened.decode_rows_omitted == sum(row.kind == "decode" for row in trace.rows)
        assert len(shortened.rows) + shortened.decode_rows_omitted == len(trace.rows)
        assert shortened.tokens_omitted + sum(map(len, (entry.token_ids for entry in shortened.emitted))) == sum(
            map(len, (entry.token_ids for entry in trace.emitted))
        )
        assert [entry.request_id for entry in shortened.emitted if entry.finish_reason] == [
            entry.request_id for entry in trace.emitted if entry.finish_reason
        ]
        full.apply(trace)
        summary.apply(shortened)
        assert full.holders == summary.holders and (full.findable == summary.findable).all()


def test_workbench_trace_prints_a_step_in_four_parts_and_a_request_history(traced_run, capsys):
    out, log = traced_run
    step = next(record for record in log.traces if record["preemptions"])
    assert main(["trace", str(out), "--step", str(step["step"])]) == 0
    printed = capsys.readouterr().out
    for part in ("before:", "computation:", "persisted:", "to the caller:"):
        assert f"\n{part}" in printed
    victim, reason = step["preemptions"][0]
    assert f"preempted request {victim}: {reason}" in printed and "(preempted)" in printed
    assert main(["trace", str(out / RUN_LOG_NAME), "--request", victim]) == 0
    history = capsys.readouterr().out
    assert history.startswith(f"request {victim}, arrived ") and f"preempted: {reason}" in history
    assert "admitted from waiting" in history and "finished: length" in history


def test_a_log_without_traces_or_a_missing_step_is_a_one_line_error(traced_run, tmp_path, capsys):
    out, log = traced_run
    old = tmp_path / "old"
    old.mkdir()
    lines = (out / RUN_LOG_NAME).read_text().splitlines()
    (old / RUN_LOG_NAME).write_text("\n".join(line for line in lines if '"type": "trace"' not in line) + "\n")
    assert read_run_log(old / RUN_LOG_NAME).steps  # an old log still opens
    assert main(["trace", str(old), "--step", "0"]) == 2
    assert "has no step traces: recorded before step traces were logged" in capsys.readouterr().err
    last = log.traces[-1]["step"]
    assert main(["trace", str(out), "--step", str(last + 1)]) == 2
    assert f"no trace of step {last + 1}; this log traces steps 0..{last}" in capsys.readouterr().err
    assert main(["trace", str(out), "--request", "no-such"]) == 2


def test_auto_writes_full_traces_first_then_summaries_and_the_footer_says_where(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setattr("workbench.runs.run_recorder.FULL_TRACE_STEPS", 3)
    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory), tmp_path)  # trace = "auto", the default
    log = read_run_log(tmp_path / RUN_LOG_NAME, with_traces=True)
    assert [record["full"] for record in log.traces] == [True] * 3 + [False] * (len(log.traces) - 3)
    assert (log.header["trace"], log.footer["traces"], log.footer["traces_full"]) == ("auto", len(log.traces), 3)


def test_a_requests_history_counts_its_waits_after_a_preemption(tiny_llama):
    """The steps between a preemption and the readmission in which nothing happened to the
    request (it waited behind another) are counted in its history, as the waits before its first
    admission are."""
    directory, _ = tiny_llama
    engine = tiny_engine(directory, num_kv_blocks=14, block_size=4)  # six growing requests: preemptions
    arrivals = {
        engine.add_request(
            [1, 2, 3, 4, 5, 6, 7, 8], SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
        ): engine.clock()
        for _ in range(6)
    }
    traces = []
    while engine.has_unfinished():
        traces.append(engine.step().trace)
    checked = 0
    for preempting in (trace for trace in traces if trace.preemptions):
        victim = preempting.preemptions[0].victim
        later = [trace for trace in traces if trace.step > preempting.step]
        readmitted = next(
            trace.step for trace in later if any(row.request_id == victim and row.admitted_from for row in trace.rows)
        )
        silent = sum(1 for trace in later if trace.step < readmitted and not request_events(trace, victim))
        history = format_request(traces, victim, arrivals[victim]).splitlines()
        start = next(number for number, line in enumerate(history) if f"step {preempting.step} (" in line)
        end = next(number for number, line in enumerate(history) if f"step {readmitted} (" in line)
        counted = sum(
            int(line.split()[0]) for line in history[start + 1 : end] if "waiting behind the head of its queue" in line
        )
        assert counted == silent, (victim, history[start : end + 1])
        checked += silent > 0
    assert checked  # some preemption was followed by silent waits


def test_a_log_recorded_with_step_trace_off_says_so(tiny_llama, tmp_path, capsys):
    """It used to blame the in-process engine for keeping no traces."""
    directory, _ = tiny_llama
    scenario = tiny_scenario(directory)
    run_headless(dataclasses.replace(scenario, engine=dataclasses.replace(scenario.engine, step_trace=False)), tmp_path)
    assert main(["trace", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith(
        "has no step traces: recorded with engine.step_trace = false (set it true to record them)\n"
    )
