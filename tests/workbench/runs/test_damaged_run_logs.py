"""A run log damaged on disk (bytes that are not UTF-8, lines that are not JSON, records with a
missing key or a value of the wrong type) is read past the damage: the bad lines are skipped and
counted with their numbers, everything else is reported, and `trace`, `compare` and the report
say so instead of failing with a traceback. Reading used to stop at the first bad line: a whole
run was reported as a crash with its later requests never sent."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from engine.errors import ConfigError
from tests.workbench.tiny_runs import tiny_scenario
from workbench.analysis.compare import load_report
from workbench.analysis.report import build_report
from workbench.bench.headless import run_headless
from workbench.cli import main
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME


@pytest.fixture(scope="module")
def whole_run(tiny_llama, tmp_path_factory):
    directory, _ = tiny_llama
    out = tmp_path_factory.mktemp("whole")
    report = run_headless(dataclasses.replace(tiny_scenario(directory, num_kv_blocks=24), trace="full"), out)
    assert report["complete"]
    return out, report


def damaged_copy(whole_run, tmp_path, damage) -> tuple:
    """A copy of the run whose log lines went through `damage(number, line) -> bytes`."""
    source, report = whole_run
    shutil.copytree(source, tmp_path, dirs_exist_ok=True)
    lines = (source / RUN_LOG_NAME).read_bytes().splitlines(keepends=True)
    (tmp_path / RUN_LOG_NAME).write_bytes(b"".join(damage(number, line) for number, line in enumerate(lines, start=1)))
    return tmp_path, report, lines


def line_numbers(lines, kind: str) -> list[int]:
    return [number for number, line in enumerate(lines, start=1) if json.loads(line)["type"] == kind]


def test_damage_in_the_middle_is_skipped_counted_and_reported(whole_run, tmp_path):
    lines = (whole_run[0] / RUN_LOG_NAME).read_bytes().splitlines(keepends=True)
    requests, steps = line_numbers(lines, "request"), line_numbers(lines, "step")
    broken = {
        requests[0]: b"\xff\xfe not utf-8\n",
        requests[1]: b'{"type": "request", "half a line\n',
        requests[2]: json.dumps({**json.loads(lines[requests[2] - 1]), "token_times": "soon"}).encode() + b"\n",
        steps[3]: json.dumps({**json.loads(lines[steps[3] - 1]), "kv_blocks_total": "many"}).encode() + b"\n",
        steps[4]: json.dumps(
            {key: value for key, value in json.loads(lines[steps[4] - 1]).items() if key != "decode_tokens"}
        ).encode()
        + b"\n",
    }
    folder, report, _ = damaged_copy(whole_run, tmp_path, lambda number, line: broken.get(number, line))
    log = read_run_log(folder / RUN_LOG_NAME)
    assert log.skipped_lines == sorted(
        [
            (steps[3], "kv_blocks_total: expected <class 'int'>, got 'many'"),
            (steps[4], "no 'decode_tokens'"),
            (requests[0], "not UTF-8 (byte 1)"),
            (requests[1], "not JSON"),
            (requests[2], "token_times: expected list[float], got 'soon'"),
        ]
    )
    rebuilt = build_report(log)
    planned = report["requests_planned"]
    # Read to the end: the footer and every later request are there; nothing is called "never sent".
    assert log.complete and len(log.requests) == planned - 3
    assert rebuilt["metrics"]["requests_not_sent"]["value"] == 0
    assert (
        rebuilt["incomplete_because"] == [log.skipped_summary()]
        and "5 lines skipped" in rebuilt["incomplete_because"][0]
    )


def test_trace_reads_past_damaged_lines_and_says_so(whole_run, tmp_path, capsys):
    lines = (whole_run[0] / RUN_LOG_NAME).read_bytes().splitlines(keepends=True)
    traces = line_numbers(lines, "trace")
    wrong_shape = {**json.loads(lines[traces[1] - 1]), "rows": [["only", "two"]]}
    broken = {traces[0]: b"\x80\x81\n", traces[1]: json.dumps(wrong_shape).encode() + b"\n"}
    folder, _, _ = damaged_copy(whole_run, tmp_path, lambda number, line: broken.get(number, line))
    assert main(["trace", str(folder), "--step", "3"]) == 0
    captured = capsys.readouterr()
    assert "step 3" in captured.out.lower()
    assert (
        f"line {traces[0]}: not UTF-8" in captured.err
        and f"line {traces[1]}: a trace entry of the wrong shape" in captured.err
    )
    request_id = read_run_log(folder / RUN_LOG_NAME).requests[-1]["request_id"]
    assert main(["trace", str(folder), "--request", request_id]) == 0


def test_a_log_without_a_usable_header_is_one_message(whole_run, tmp_path):
    folder, _, _ = damaged_copy(whole_run, tmp_path, lambda number, line: b"\xff garbage\n" if number == 1 else line)
    with pytest.raises(ConfigError, match=r"no usable header line; not a workbench run log \(.*line 1: not UTF-8"):
        read_run_log(folder / RUN_LOG_NAME)
    assert main(["trace", str(folder)]) == 2


def test_a_report_whose_metrics_are_not_metrics_is_one_message(whole_run, tmp_path):
    source, report = whole_run
    (tmp_path / "report.json").write_text(json.dumps({**report, "metrics": [1, 2]}))
    with pytest.raises(
        ConfigError, match=r"metrics: expected an object of \{\"value\", \"unit\", \"n\"\} entries, got \[1, 2\]"
    ):
        load_report(tmp_path)
    assert main(["compare", str(source), str(tmp_path)]) == 2


def test_a_step_line_with_a_key_this_version_does_not_know_is_read_and_reported(whole_run, tmp_path):
    """Issue 58 #10: a step line with an unknown key (a newer version's log) raised a TypeError in
    the report writer. The key is left out; the report, the CSVs and the window's replay read it."""
    from workbench.live.metrics_store import MetricsStore

    def add_key(number, line):
        record = json.loads(line)
        return json.dumps({**record, "from_a_newer_version": 1}).encode() + b"\n" if record["type"] == "step" else line

    folder, report, _ = damaged_copy(whole_run, tmp_path, add_key)
    assert main(["report", str(folder)]) == 0
    rebuilt = load_report(folder)
    assert rebuilt["complete"] and rebuilt["metrics"]["ttft_p50_ms"] == report["metrics"]["ttft_p50_ms"]
    assert "from_a_newer_version" not in (folder / "steps.csv").read_text().splitlines()[0]
    log = read_run_log(folder / RUN_LOG_NAME)
    assert not log.skipped_lines and MetricsStore.from_run_log(log).snapshot() is not None
