"""The window's state, without Qt: which run the plots and panes show (the live one, or an opened
run), the selected step and request, and the run the Why tab explains. `MainWindow` keeps layout
and wiring and asks this object what to show; each transition says what the panes must forget, so
that no pane keeps a run the others have left (a request detail of a previous run, a Why tab of an
opened run after going back to live). Tested without a window (tests/workbench/live/test_window_session.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from workbench.analysis.explain import Explanation, explain
from workbench.live.request_rows import ENDED_STATES, RequestRow
from workbench.runs.run_log import RunLog
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.step_traces.log import read_trace, why_no_traces
from workbench.step_traces.store import TraceStore
from workbench.step_traces.text import format_request


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


@dataclass
class OpenedRun:
    """Everything an opened run shows, read before any pane switches to it."""

    name: str
    log: RunLog
    past: PastTraces
    explanation: Explanation


class WindowSession:
    def __init__(self):
        self.opened: OpenedRun | None = None  # None: the plots and panes show the live run
        self.selected_step: int | None = None  # pinned by a click on a plot; None: follow the run
        self.selected_request: str | None = None
        self.explained: RunLog | None = None  # the run the Why tab explains, read with its traces

    @property
    def viewing_past_run(self) -> bool:
        return self.opened is not None

    def read_opened_run(self, name: str, log: RunLog, above_percentile: float) -> OpenedRun:
        """An opened run's traces and explanation, or the error that reading them raised; nothing
        changes until `show_opened_run`."""
        return OpenedRun(name, log, past_traces(log), explain(log, above_percentile))

    def show_opened_run(self, run: OpenedRun) -> None:
        """The plots, the Step source and the Why tab switch to `run`; no step is selected."""
        self.opened, self.selected_step, self.explained = run, None, run.log

    def back_to_live(self) -> bool:
        """Leave an opened run: its explanation and its selected request go with it (an id of the
        opened run would mark the live run's namesake). Whether a run was open."""
        was_open = self.opened is not None
        if was_open:
            self.explained, self.selected_request = None, None
        self.opened, self.selected_step = None, None
        return was_open

    def explain_live(self, log: RunLog) -> None:
        self.explained = log

    def new_engine(self) -> None:
        """A new engine or server: the live run is a new one, and no step of the old one is kept."""
        self.opened, self.selected_step = None, None

    def new_run(self) -> None:
        """A new run on the same engine: no request, step or explanation of the previous run is
        shown any more."""
        self.selected_request, self.selected_step, self.explained = None, None, None

    def select_step(self, step: int) -> None:
        self.selected_step = step

    def follow_live(self) -> None:
        self.selected_step = None

    def select_request(self, request_id: str | None) -> None:
        self.selected_request = request_id

    # ----- what the step panes show ----------------------------------------------------------------

    def trace_source(self, live: TraceStore | None, live_start: float) -> tuple[TraceStore | None, float]:
        """The traces being looked at (the live engine's, or an opened run's) and the engine-clock
        time their run started (plot times count from it)."""
        if self.opened is not None:
            return self.opened.past.store, self.opened.past.start_time
        return live, live_start

    def block_map_rows(self, live_rows: list[str]) -> dict[str, int]:
        """Each request's row (its colour in the block map): the live run's table order, or the
        opened run's order of first appearance."""
        if self.opened is not None:
            return self.opened.past.rows
        return {request_id: index for index, request_id in enumerate(live_rows)}


def step_not_kept(step: int, traces: TraceStore | None) -> str:
    """Why a step cannot be shown: the store keeps only the latest steps."""
    kept = traces.step_range() if traces is not None else None
    return f"step {step} is not kept" + (f" (steps {kept[0]}..{kept[1]} are; the run log has all)" if kept else "")


def live_request_history(traces: TraceStore | None, origin: float, row: RequestRow) -> str:
    """`workbench trace --request`'s text for a row of the live run, from the steps between its
    arrival and its end (the ending step ends just before the end is logged)."""
    if traces is None or not row.timeline:
        return ""
    arrival = origin + row.timeline[0][0]
    end = origin + row.timeline[-1][0] + 1.0 if row.state in ENDED_STATES else float("inf")
    return format_request(traces.traces_between(arrival, end), row.request_id, arrival, origin)


def opened_run_summary(folder: str, run: OpenedRun, incomplete: list[str], finished: int, arrived: int) -> str:
    """The Runs tab's text for an opened run: complete or why not (`incomplete`, as report.json
    says), and what its log skipped or its traces cannot show."""
    note = "\n".join(filter(None, [run.log.skipped_summary(Path(folder) / RUN_LOG_NAME), run.past.note]))
    state = (
        "complete"
        if not incomplete
        else f"incomplete: {'; '.join(incomplete)}; {finished} finished of {arrived} arrived"
    )
    return f"viewing {folder} ({state}); 'Back to live' returns" + (f"\n{note}" if note else "")
