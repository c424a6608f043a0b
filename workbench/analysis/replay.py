"""What if: a recorded run's requests sent again, through any backend, with other settings.

The run log keeps each request's arrival, prompt length, output tokens, tag and plan (what its
traffic asked for: `planned`), not its text. A replay writes them as a trace
(`replayed-requests.jsonl`: arrival_s, prompt_tokens, output_tokens, tag) and runs the original
scenario, its deadline included, with that trace as its only traffic (its events' requests are in
it already), `--set` overrides applied on top, so prompts are synthetic tokens of the recorded
lengths. Each request asks for its planned max_tokens, end-of-sequence ignored, except one that
ended on an end-of-sequence token or a stop string: the text decided that end, and synthetic
prompts cannot, so it asks for what it produced. So the same settings on a simulated GPU give
every request its recorded output length, unfinished and rejected ones included. A log written
before plans were kept gives each request what it produced, at least one token: those that did
not finish are counted, since their planned length is not there.

Requests are paired by arrival order, ties by the order they were sent (the run log's
`sent_index`; the replay names them afresh and sends tied ones in the same order), and each pair
compared: TTFT, TPOT and end-to-end latency, before and after, with both sides' lengths
(`per_request.csv`).
"""

from __future__ import annotations

import copy
import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError
from engine.requests.metrics import FINISHED_REASONS
from engine.settings import apply_override, build
from workbench.runs.run_log import RunLog, request_metrics
from workbench.traffic.scenario import Scenario

REPLAY_TRACE = "replayed-requests.jsonl"
PER_REQUEST_CSV = "per_request.csv"
REPLAY_NOTE = (
    "the recorded requests sent again: the same arrival times, prompt and output lengths and tags; prompt "
    "contents are synthetic tokens, so prefix-cache hits of shared text are not reproduced"
)


@dataclass(frozen=True)
class RecordedRequest:
    arrival_s: float  # after the run's start
    prompt_tokens: int
    output_tokens: int
    tag: str
    length_known: bool  # False: no plan in the log and it did not finish, so its output length is a guess


def recorded_requests(log: RunLog, where: str) -> list[RecordedRequest]:
    """The run's requests in arrival order, as a replay sends them."""
    start = log.header["start_time"]
    requests = []
    for record in sending_order(log):
        produced = len(record.get("token_times") or [])
        planned = record.get("planned")
        if planned is not None:
            ended_by_its_text = record["finish_reason"] == "stop"
            output, known = (produced if ended_by_its_text else planned["max_tokens"]), True
        else:
            output, known = produced, record["finish_reason"] in FINISHED_REASONS and produced > 0
        requests.append(
            RecordedRequest(
                arrival_s=max(0.0, record["arrival_time"] - start),
                prompt_tokens=max(1, record["num_prompt_tokens"]),
                output_tokens=max(1, output),
                tag=record["tag"],
                length_known=known,
            )
        )
    if not requests:
        raise ConfigError(f"{where}: the run has no requests to replay")
    return requests


def sending_order(log: RunLog) -> list[dict]:
    """The request records by arrival, ties by the order they were sent (logs before
    `sent_index`: as logged, which is the order they ended)."""
    return sorted(log.requests, key=lambda record: (record["arrival_time"], record.get("sent_index", 0)))


def write_replay_trace(requests: list[RecordedRequest], path: Path) -> None:
    with path.open("w") as handle:
        for request in requests:
            row = {
                "arrival_s": request.arrival_s,
                "prompt_tokens": request.prompt_tokens,
                "output_tokens": request.output_tokens,
                "tag": request.tag,
            }
            handle.write(json.dumps(row) + "\n")


def replay_scenario(log: RunLog, trace_path: Path, overrides: list[str], where: str) -> Scenario:
    """The original run's scenario with the recorded requests as its only traffic, then `overrides`."""
    raw = copy.deepcopy(log.header["scenario"])
    original_traffic = raw.get("traffic") or {}
    raw["traffic"] = {
        "prompts": "trace",
        "trace_file": str(trace_path),
        "num_requests": 0,
        "temperature": original_traffic.get("temperature", 0.0),
        "ignore_eos": True,  # each output as long as it was
        "tag": original_traffic.get("tag", "replayed"),
    }
    raw["events"], raw["variants"], raw["decision"] = [], {}, None
    raw["name"] = f"{raw.get('name', 'run')} (replay)"
    for assignment in overrides:
        apply_override(raw, assignment)
    return build(Scenario, raw, where)


def per_request_rows(original: RunLog, replay: RunLog) -> list[dict]:
    """One row per recorded request, paired with its replay by sending order (`sending_order`)."""
    rows = []
    for index, (before, after) in enumerate(zip(sending_order(original), sending_order(replay)), start=1):
        first, second = request_metrics(before), request_metrics(after)
        row = {
            "index": index,
            "tag": before["tag"],
            "prompt_tokens": before["num_prompt_tokens"],
            "replay_prompt_tokens": after["num_prompt_tokens"],
            "output_tokens": first.num_output_tokens,
            "replay_output_tokens": second.num_output_tokens,
            "original_id": before["request_id"],
            "replay_id": after["request_id"],
            "original_finish": before["finish_reason"],
            "replay_finish": after["finish_reason"],
        }
        for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
            old, new = getattr(first, name), getattr(second, name)
            row[f"original_{name}"], row[f"replay_{name}"] = old, new
            row[f"change_{name}"] = None if old is None or new is None else new - old
        rows.append(row)
    return rows


def write_per_request_csv(rows: list[dict], path: Path) -> None:
    if not rows:
        return
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def per_request_summary(rows: list[dict]) -> str:
    """e.g. "e2e: 180 of 200 paired requests faster, 20 slower; median change -1,234 ms (n = 200)"."""
    changes = [row["change_e2e_ms"] for row in rows if row["change_e2e_ms"] is not None]
    if not changes:
        return "e2e: no request finished in both runs"
    faster = sum(change < 0 for change in changes)
    slower = sum(change > 0 for change in changes)
    return (
        f"e2e: {faster} of {len(changes)} requests finished in both runs faster in the replay, {slower} slower; "
        f"median change {statistics.median(changes):+,.0f} ms (n = {len(changes)})"
    )
