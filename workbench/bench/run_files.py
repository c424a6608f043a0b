"""A run folder as the window saves and opens it (the `workbench bench --out` layout): the run log,
its report files, and, for a past run, its metrics replayed and its step traces ready for the
Step panel and the block map. No Qt: the window's Runs panel calls these and draws the result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import EngineError
from workbench.analysis.report import write_report_files
from workbench.live.metrics_store import MetricsStore
from workbench.runs.run_log import RunLog, read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.step_traces.log import read_trace, why_no_traces
from workbench.step_traces.store import TraceStore


def save_run(target: Path, write_log_copy: Callable[[Path], None]) -> tuple[RunLog, dict]:
    """Into `target`: the run log (`write_log_copy` writes it, e.g. the engine thread between two
    steps) and the report files; the log read back and its report. OSError, EngineError."""
    target.mkdir(parents=True, exist_ok=True)
    write_log_copy(target / RUN_LOG_NAME)
    log = read_run_log(target / RUN_LOG_NAME, with_traces=True)
    return log, write_report_files(log, target)


def open_run(folder: Path, with_traces: bool = False) -> tuple[RunLog, MetricsStore]:
    """A run folder's log and its metrics replayed; EngineError naming the folder for a log of
    another shape (a header without the keys a run log has)."""
    try:
        log = read_run_log(folder / RUN_LOG_NAME, with_traces)
        return log, MetricsStore.from_run_log(log)
    except (KeyError, TypeError):
        raise EngineError(f"{folder}: not a workbench run log") from None


@dataclass
class PastTraces:
    """An opened run's step traces: the store the Step panel reads, each request's row in order
    of first appearance (its block-map colour), the run's start on the engine clock, and what
    they cannot show (empty when nothing)."""

    store: TraceStore | None
    start_time: float
    rows: dict[str, int] = field(default_factory=dict)
    note: str = ""


def past_traces(log: RunLog) -> PastTraces:
    if not log.traces:
        return PastTraces(
            None, log.header["start_time"], note=f"this run log has no step traces: {why_no_traces(log.header)}"
        )
    kv_blocks = log.header["engine"].get("kv_blocks")
    if not isinstance(kv_blocks, int) or kv_blocks < 1:  # a log written by hand or by another tool
        return PastTraces(
            None,
            log.header["start_time"],
            note=f"its step traces cannot be shown: the header's engine.kv_blocks (the cache's size in blocks) "
            f"is {'missing' if kv_blocks is None else repr(kv_blocks)}",
        )
    decoded = [read_trace(record) for record in log.traces]
    store = TraceStore(kv_blocks, capacity=len(decoded))
    rows: dict[str, int] = {}
    for trace in decoded:
        store.add(trace)
        for request_id in (row.request_id for row in trace.rows):
            rows.setdefault(request_id, len(rows))
    held_before = decoded[0].kv_before.used_blocks
    note = (
        f"the cache held {held_before} blocks from before this run: the block map shows only what its steps changed"
        if held_before
        else ""
    )
    return PastTraces(store, log.header["start_time"], rows, note)
