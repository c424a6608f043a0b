"""A run folder as the window saves and opens it (the `workbench bench --out` layout): the run log,
its report files, and, for a past run, its metrics replayed. No Qt: the window's Runs panel calls
these and draws the result; an opened run's step traces are workbench/live/window_session.py's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.errors import EngineError
from workbench.analysis.report import write_report_files
from workbench.live.metrics_store import MetricsStore
from workbench.runs.run_log import RunLog, read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME


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
