"""`workbench replay` on constructed runs: the recorded requests go out again as they arrived; the
same settings give the same latencies on a simulated GPU, fewer slots longer ones, and bad
replays are refused with one line."""

from __future__ import annotations

import csv
import json

import pytest

from workbench.analysis.replay import recorded_requests, sending_order
from workbench.cli import main
from workbench.runs.run_log import read_run_log

SIMULATED = "simulated:llama-3-8b@a100-80gb"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run of chat-steady on a simulated GPU, with a burst injected on top of its traffic."""
    folder = tmp_path_factory.mktemp("recorded")
    code = main(
        ["bench", "--preset", "chat-steady", "--set", f"engine.model={SIMULATED}", "--set", "traffic.num_requests=60"]
        + ["--set", "traffic.rate=30", "--set", "engine.max_num_seqs=8", "--out", str(folder), "--no-plots"]
    )
    assert code == 0
    return folder


def sent(folder):
    log = read_run_log(folder / "run.jsonl")
    start = log.header["start_time"]
    return [
        (
            round(record["arrival_time"] - start, 9),
            record["num_prompt_tokens"],
            len(record["token_times"]),
            record["tag"],
        )
        for record in sorted(log.requests, key=lambda record: record["arrival_time"])
    ]


def test_the_same_settings_replay_the_same_requests_with_the_same_latencies(recorded, tmp_path):
    code = main(["replay", str(recorded), "--out", str(tmp_path), "--no-plots"])
    assert code == 0 and sent(tmp_path) == sent(recorded)
    rows = list(csv.DictReader((tmp_path / "per_request.csv").open()))
    assert len(rows) == 60
    for row in rows:  # a simulated GPU's clock: the same schedule gives the same times
        assert float(row["replay_e2e_ms"]) == pytest.approx(float(row["original_e2e_ms"]), rel=1e-6, abs=1e-3)


def test_fewer_slots_make_every_request_wait_longer_and_the_decision_says_so(recorded, tmp_path, capsys):
    code = main(
        ["replay", str(recorded), "--set", "engine.max_num_seqs=2", "--intended", "e2e_p90_ms:-10%"]
        + ["--out", str(tmp_path), "--no-plots"]
    )
    printed = capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "per_request.csv").open()))
    # Two at a time: the queue grows, so most wait longer (the first few decode faster in a smaller batch).
    assert code == 0 and sum(float(row["change_e2e_ms"]) > 0 for row in rows) > 40
    comparison = json.loads((tmp_path / "comparison.json").read_text())
    # 60 requests a run bound a p90 for one pair (42 needed), not a p99 (437).
    assert comparison["verdict"].startswith("reject") and comparison["differences"] == []
    assert "the recorded requests sent again" in printed and "slower; median change +" in printed


def test_a_replay_on_another_backend_names_the_difference(recorded, tmp_path):
    assert main(["replay", str(recorded), "--backend", "simulated:llama-2-7b@h100-80gb", "--out", str(tmp_path)]) == 0
    comparison = json.loads((tmp_path / "comparison.json").read_text())
    assert any(line.startswith("model:") for line in comparison["differences"])
    assert (tmp_path / "latency.png").exists() and (tmp_path / "per_request.png").stat().st_size > 10_000


def test_bad_replays_get_one_line(recorded, tmp_path, capsys):
    assert main(["replay", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no run log here" in capsys.readouterr().err
    assert main(["replay", str(recorded), "--set", "engine.max_num_seq=2", "--out", str(tmp_path / "out")]) == 2
    assert "max_num_seq" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # a bad --set left a half-made --out
    assert main(["replay", str(recorded), "--intended", "fast", "--out", str(tmp_path / "out")]) == 2
    assert "expected METRIC:+N%" in capsys.readouterr().err
    # Checked before anything runs: a metric the run does not have, an --out holding a run.
    assert main(["replay", str(recorded), "--intended", "nosuchmetric:+5%", "--out", str(tmp_path / "out")]) == 2
    assert "nosuchmetric:+5%: no such metric in " in capsys.readouterr().err and not (tmp_path / "out").exists()
    before = (recorded / "run.jsonl").read_bytes()
    assert main(["replay", str(recorded), "--out", str(recorded)]) == 2  # it overwrote the recorded run
    assert "holds a run already (the run replayed)" in capsys.readouterr().err
    assert (recorded / "run.jsonl").read_bytes() == before


TIES = """
name = "ties"
seed = 0
[engine]
long_prompt_threshold = 512
[[events]]
at_s = 0.0
action = "inject"
count = 1
prompt_tokens = 6000
output_tokens = 256
tag = "long"
[[events]]
at_s = 0.0
action = "inject"
count = 20
prompt_tokens = 64
output_tokens = 4
tag = "chat"
"""


def test_requests_arriving_together_are_paired_in_the_order_they_were_sent(tmp_path):
    """long-prompt-isolation's shape: a long prompt and 20 chats arrive at one instant, the long
    one sent first and ending last. Paired by the order they ended, per_request.csv compared the
    6,000-token prompt with a 64-token chat."""
    preset = tmp_path / "ties.toml"
    preset.write_text(TIES)
    recorded = tmp_path / "recorded"
    arguments = ["--set", f"engine.model={SIMULATED}", "--no-plots"]
    assert main(["bench", "--preset", str(preset), *arguments, "--out", str(recorded)]) == 0
    assert read_run_log(recorded / "run.jsonl").requests[-1]["tag"] == "long"  # it ended last
    assert main(["replay", str(recorded), *arguments, "--out", str(tmp_path / "again")]) == 0
    rows = list(csv.DictReader((tmp_path / "again" / "per_request.csv").open()))
    assert len(rows) == 21 and rows[0]["prompt_tokens"] == "6000"  # the long prompt was sent first
    assert all(row["prompt_tokens"] == row["replay_prompt_tokens"] for row in rows)
    assert all(row["output_tokens"] == row["replay_output_tokens"] for row in rows)
    # The same settings on a simulated clock: every pair's latency equal, the long prompt's too.
    assert all(float(row["change_e2e_ms"]) == pytest.approx(0.0, abs=1e-3) for row in rows)


def cut_short_run(folder):
    """chat-steady on a simulated GPU stopped by its deadline with requests mid-output."""
    code = main(
        ["bench", "--preset", "chat-steady", "--set", f"engine.model={SIMULATED}", "--set", "traffic.num_requests=40"]
        + ["--set", "traffic.rate=40", "--set", "max_duration_s=0.6", "--out", str(folder), "--no-plots"]
    )
    assert code == 0
    log = read_run_log(folder / "run.jsonl")
    unfinished = [record for record in log.requests if record["finish_reason"] == "unfinished"]
    assert any(record["token_times"] for record in unfinished), "the run must cut requests after their first token"
    return log


def test_a_replay_of_a_run_cut_short_reproduces_every_output_length(tmp_path):
    """Issue 49 #1: the log keeps each request's plan, so a replay with the same settings asks each
    request for what it asked for, and the same deadline cuts the same requests at the same token
    on a simulated GPU. Before, unfinished requests were replayed with what they had produced, ran
    to that length and finished."""
    log = cut_short_run(tmp_path / "original")
    records = sending_order(log)
    for record in records:  # output_len: normal, mean 64, within [8, 128]
        planned = record["planned"]
        assert 8 <= planned["max_tokens"] <= 128 and len(record["token_times"]) <= planned["max_tokens"]
        assert planned["source"] == "synthetic" and planned["prompt_tokens"] == record["num_prompt_tokens"]
    assert all(request.length_known for request in recorded_requests(log, "run"))
    assert main(["replay", str(tmp_path / "original"), "--out", str(tmp_path / "replay"), "--no-plots"]) == 0
    replayed = sending_order(read_run_log(tmp_path / "replay" / "run.jsonl"))

    def ends(records):
        return [(len(record["token_times"]), record["finish_reason"]) for record in records]

    assert ends(replayed) == ends(records)


def test_a_log_without_plans_replays_unfinished_requests_with_what_they_had(tmp_path):
    """Logs written before plans were kept: a request that did not finish is sent with the output it
    had produced, and counted as of unknown length (a planted `or` for `and` called them known)."""
    log = cut_short_run(tmp_path)
    for record in log.requests:
        del record["planned"]
    requests = recorded_requests(log, "run")
    for request, record in zip(requests, sending_order(log)):
        produced = len(record["token_times"])
        assert request.length_known == (record["finish_reason"] in ("stop", "length"))
        assert request.output_tokens == max(1, produced)
