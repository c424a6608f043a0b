"""The run log: an append-only JSONL file written while a run happens, one line per event.

Lines: a "header" (configuration, versions, seed, SLOs), a "step" per engine step, a "trace" per
engine step of the in-process engine (workbench/trace_log.py; logs from before traces have none),
a "request" per ended request, and a "footer" when the run ends cleanly. Each line is flushed as it is
written, so a crash or Ctrl-C loses at most the step in flight and a partial report can still
be built from what is there.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from engine.errors import ConfigError
from engine.metrics import RequestMetrics, StepStats


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

    def request(self, request_id: str, tag: str, metrics: RequestMetrics) -> None:
        self.write("request", {"request_id": request_id, "tag": tag, **dataclasses.asdict(metrics)})

    def close(self) -> None:
        self._file.close()


@dataclass
class RunLog:
    header: dict
    steps: list[dict]
    requests: list[dict]
    footer: dict | None  # None when the run did not end cleanly
    traces: list[dict] = dataclasses.field(default_factory=list)  # trace lines as written (trace_log.read_trace)

    @property
    def complete(self) -> bool:
        return self.footer is not None


# How the writer starts a trace line: reports and plots skip those lines without parsing them.
_TRACE_LINE_START = json.dumps({"type": "trace"})[:-1]


def read_run_log(path: Path, with_traces: bool = False) -> RunLog:
    """The log's records; ConfigError when the file is missing or is not a run log. The step
    traces (most of a log's bytes) are read only when asked for."""
    header, steps, requests, footer, traces = None, [], [], None, []
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError as error:
        raise ConfigError(f"{path}: no run log here (a run folder holds run.jsonl)") from error
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror})") from error
    with handle:
        for line in handle:
            if not with_traces and line.startswith(_TRACE_LINE_START):
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                break  # a line cut short by the crash
            if not isinstance(record, dict) or "type" not in record:
                break
            kind = record.pop("type")
            if kind == "header":
                header = record
            elif kind == "step":
                steps.append(record)
            elif kind == "trace":
                traces.append(record)
            elif kind == "request":
                requests.append(record)
            elif kind == "footer":
                footer = record
    if header is None or not {"start_time", "scenario", "engine"} <= set(header):
        raise ConfigError(f"{path}: no header line; not a workbench run log")
    return RunLog(header, steps, requests, footer, traces)


def request_metrics(record: dict) -> RequestMetrics:
    """A logged request back as `RequestMetrics` (for its derived latencies)."""
    fields = {field.name for field in dataclasses.fields(RequestMetrics)}
    return RequestMetrics(**{key: value for key, value in record.items() if key in fields})
