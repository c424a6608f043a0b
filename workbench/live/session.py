"""The window's state, without Qt: which run the plots and panes show (the live one, or an opened
run), the selected step and request, and the run the Why tab explains. `MainWindow` keeps layout
and wiring and asks this object what to show; each transition says what the panes must forget, so
that no pane keeps a run the others have left (a request detail of a previous run, a Why tab of an
opened run after going back to live). Tested without a window (tests/workbench/live/test_session.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.analysis.explain import Explanation, explain
from workbench.runs.run_log import RunLog
from workbench.step_traces.log import read_trace, why_no_traces
from workbench.step_traces.store import TraceStore


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
