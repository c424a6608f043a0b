"""The run log: an append-only JSONL file written while a run happens, one line per event.

Lines: a "header" (configuration, versions, seed, SLOs), a "step" per engine step, a "trace" per
engine step of the in-process engine (workbench/step_traces/log.py; logs from before traces have none),
a "request" per ended request (its outcome, and since December 2026 its plan: prompt tokens,
max_tokens, source, session, whether the context cut it), and a "footer" when the run ends
cleanly. Each line is flushed as it is written, so a crash or Ctrl-C loses at most the step in
flight and a partial report can still be built from what is there.

Reading keeps going past a line it cannot use (not UTF-8, not JSON, a missing key or a wrong
type: workbench/runs/log_records.py): the line is skipped and listed in `skipped_lines` with its number
and why, and reports say so: one damaged line in the middle must not make a whole run read as a
crash with half its requests never sent.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from engine.errors import ConfigError
from engine.requests.metrics import RequestMetrics, StepStats
from workbench.runs.log_records import record_problem


class RunLogWriter:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, kind: str, record: dict) -> None:
        self._file.write(json.dumps({"type": kind, **record}) + "\n")
        self._file.flush()

    def step(self, stats: StepStats) -> None:
        self.write("step", dataclasses.asdict(stats))

    def request(
        self,
        request_id: str,
        tag: str,
        metrics: RequestMetrics,
        sent_index: int | None = None,
        planned: dict | None = None,
    ) -> None:
        """One request's record; `sent_index`, its place in the order of sending, and `planned`,
        what was asked for (workbench/traffic/profile.py's PlannedRequest.record), where known."""
        known = {key: value for key, value in (("sent_index", sent_index), ("planned", planned)) if value is not None}
        self.write("request", {"request_id": request_id, "tag": tag, **known, **dataclasses.asdict(metrics)})

    def close(self) -> None:
        self._file.close()


@dataclass
class RunLog:
    header: dict
    steps: list[dict]
    requests: list[dict]
    footer: dict | None  # None when the run did not end cleanly
    traces: list[dict] = dataclasses.field(default_factory=list)  # trace lines as written (trace_log.read_trace)
    # Lines that could not be used: (line number from 1, why), in file order.
    skipped_lines: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    traces_read: bool = False  # the trace lines were read (empty `traces` then means the log has none)

    @property
    def complete(self) -> bool:
        return self.footer is not None

    def skipped_summary(self, path: Path | str = "run.jsonl", most: int = 3) -> str:
        """e.g. "run.jsonl: 2 lines skipped (line 7: not UTF-8; line 9: no 'tag')", or ""."""
        if not self.skipped_lines:
            return ""
        shown = "; ".join(f"line {number}: {why}" for number, why in self.skipped_lines[:most])
        more = f"; {len(self.skipped_lines) - most} more" if len(self.skipped_lines) > most else ""
        count = len(self.skipped_lines)
        return f"{path}: {count} line{'s' if count > 1 else ''} skipped ({shown}{more})"


# How the writer starts a trace line: reports and plots skip those lines without parsing them.
_TRACE_LINE_START = json.dumps({"type": "trace"})[:-1].encode()


def read_run_log(path: Path, with_traces: bool = False) -> RunLog:
    """The log's records; ConfigError when the file is missing or has no usable header. The step
    traces (most of a log's bytes) are read only when asked for."""
    records = {"header": [], "step": [], "request": [], "footer": [], "trace": []}
    skipped = []
    try:
        handle = path.open("rb")
    except FileNotFoundError as error:
        raise ConfigError(f"{path}: no run log here (a run folder holds run.jsonl)") from error
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror})") from error
    with handle:
        for number, line in enumerate(handle, start=1):
            if not with_traces and line.startswith(_TRACE_LINE_START):
                continue
            record, problem = _parse(line)
            if problem is None:
                kind = record.pop("type")
                problem = record_problem(kind, record)
            if problem is not None:
                skipped.append((number, problem))
                continue
            records[kind].append(record)
    if not records["header"]:
        reason = f" ({RunLog({}, [], [], None, skipped_lines=skipped).skipped_summary(path)})" if skipped else ""
        raise ConfigError(f"{path}: no usable header line; not a workbench run log{reason}")
    footer = records["footer"][-1] if records["footer"] else None
    return RunLog(
        records["header"][0], records["step"], records["request"], footer, records["trace"], skipped, with_traces
    )


def _parse(line: bytes) -> tuple[dict | None, str | None]:
    """(record, None), or (None, why the line is not a record)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, f"not UTF-8 (byte {error.start + 1})"
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None, "not JSON" if text.endswith("\n") else "cut short (the run did not end cleanly)"
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        return None, 'not a run-log record (no "type")'
    return record, None


def request_metrics(record: dict) -> RequestMetrics:
    """A logged request back as `RequestMetrics` (for its derived latencies)."""
    return _known_fields(RequestMetrics, record)


def step_stats(record: dict) -> StepStats:
    """A logged step back as `StepStats`. Keys it does not know (a newer version's) are left out:
    passed on, they would raise a TypeError in the report writer."""
    return _known_fields(StepStats, record)


def _known_fields(dataclass, record: dict):
    fields = {field.name for field in dataclasses.fields(dataclass)}
    return dataclass(**{key: value for key, value in record.items() if key in fields})
