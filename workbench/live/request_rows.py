"""The requests table's and block map's data, kept by the engine thread and read by the window:
one row per request sent (state, tokens, latencies, a timeline of what happened to it), and which
request holds each KV block. No Qt: the views only draw these snapshots.

The engine thread calls `sent`, `updated`, `output` and `ended` as the runner reports them, and
`refresh` at a bounded rate; the window calls `rows`, `row`, `block_map` and `in_flight` from its
timers. One lock guards both sides; a reader gets copies.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field

import numpy as np

from engine.requests.outputs import RequestOutput
from workbench.backends.protocol import BLOCK_FREE, Backend, BackendUpdate
from workbench.runs.runner import WAITING_STATES, EndedRequest

_STATE_OF_END = {"abort": "aborted", "rejected": "rejected", "error": "failed"}  # any other reason: finished
ENDED_STATES = frozenset({*_STATE_OF_END.values(), "finished"})  # a row in one of these has ended


@dataclass
class RequestRow:
    request_id: str
    tag: str
    state: str
    prompt_token_ids: list[int]
    output_token_ids: list[int] = field(default_factory=list)
    queue_ms: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    preemptions: int = 0
    # (seconds since the run started, event), e.g. (1.20, "prefill 512 tokens")
    timeline: list[tuple[float, str]] = field(default_factory=list)
    # Speculative decoding: the proposals accepted in each step that speculated, in order, and
    # the proposed tokens, for its "decoding" entry.
    accepted_lengths: list[int] = field(default_factory=list)
    proposed_tokens: int = 0


# The last accepted lengths a timeline entry lists.
_SHOWN_LENGTHS = 16


def _is_decoding(row: RequestRow) -> bool:
    """Whether its timeline's last entry is a run of decode steps."""
    return bool(row.timeline) and row.timeline[-1][1].startswith("decoding")


def _speculation_text(row: RequestRow) -> str:
    """e.g. "decoding; speculation: 31 of 69 proposed accepted in 23 steps, lengths … 2 0 3 3"."""
    lengths = row.accepted_lengths
    shown = " ".join(str(length) for length in lengths[-_SHOWN_LENGTHS:])
    return (
        f"decoding; speculation: {sum(lengths)} of {row.proposed_tokens} proposed accepted in {len(lengths)} steps, "
        f"accepted per step {'… ' if len(lengths) > _SHOWN_LENGTHS else ''}{shown}"
    )


class RequestRows:
    def __init__(self, backend: Backend, num_blocks: int):
        self._backend = backend
        self._lock = threading.Lock()
        self._rows: dict[str, RequestRow] = {}
        self._live: dict[str, int] = {}  # unfinished request id -> its row number (block-map colour)
        self._block_map = np.full(num_blocks, BLOCK_FREE)
        self._window_blocks = np.zeros(num_blocks, dtype=bool)

    # ----- engine thread -------------------------------------------------------------------------

    def sent(self, request_id: str, tag: str, prompt_token_ids: list[int], now_s: float) -> None:
        """A row for every request sent (a rejected one never gets queued)."""
        progress = self._backend.progress(request_id)
        with self._lock:
            self._rows[request_id] = RequestRow(
                request_id,
                tag,
                progress.state if progress else "rejected",
                prompt_token_ids,
                timeline=[(now_s, "arrived")],
            )
            if progress is not None:
                self._live[request_id] = len(self._rows) - 1

    def updated(self, update: BackendUpdate, now_s: float) -> None:
        """Timeline entries for what each scheduled request did in this update."""
        with self._lock:
            for request_id, tokens in update.scheduled.items():
                row, progress = self._rows.get(request_id), self._backend.progress(request_id)
                if row is None or progress is None:
                    continue
                preemptions = progress.metrics.preemptions
                if preemptions > row.preemptions:
                    row.timeline.append((now_s, f"preempted (recompute {progress.num_tokens} tokens)"))
                row.preemptions, row.state = preemptions, progress.state
                metrics = progress.metrics
                if metrics.speculative_steps > len(row.accepted_lengths):  # a decode with proposals
                    row.accepted_lengths.append(metrics.accepted_tokens - sum(row.accepted_lengths))
                    row.proposed_tokens = metrics.proposed_tokens
                    self._set_decoding(row, now_s, _speculation_text(row))
                elif tokens > 1 or progress.num_tokens == progress.num_prompt_tokens:
                    row.timeline.append((now_s, f"prefill {tokens} tokens"))
                elif not _is_decoding(row):  # the first decode step after a prefill
                    row.timeline.append((now_s, "decoding"))

    @staticmethod
    def _set_decoding(row: RequestRow, now_s: float, text: str) -> None:
        """One "decoding" entry for a run of decode steps, from the first of them: its text says
        what speculation did so far."""
        if _is_decoding(row):
            row.timeline[-1] = (row.timeline[-1][0], text)
        else:
            row.timeline.append((now_s, text))

    def output(self, output: RequestOutput) -> None:
        with self._lock:
            row = self._rows.get(output.request_id)
            if row is not None:
                row.output_token_ids.extend(output.new_token_ids)

    def ended(self, ended: EndedRequest, now_s: float) -> None:
        metrics = ended.metrics
        with self._lock:
            self._live.pop(ended.request_id, None)
            row = self._rows.get(ended.request_id)
            if row is None:
                return
            row.state = _STATE_OF_END.get(metrics.finish_reason, "finished")
            row.queue_ms, row.ttft_ms, row.tpot_ms, row.e2e_ms = (
                metrics.queue_time_ms,
                metrics.ttft_ms,
                metrics.tpot_ms,
                metrics.e2e_ms,
            )
            row.preemptions = metrics.preemptions
            detail = f": {metrics.finish_detail}" if metrics.finish_detail else ""
            row.timeline.append((now_s, f"{row.state} ({metrics.finish_reason}{detail})"))

    def refresh(self) -> None:
        """Waiting rows' states and the block map change without being scheduled: read them anew."""
        with self._lock:
            for request_id in self._live:
                progress = self._backend.progress(request_id)
                if progress is not None:
                    self._rows[request_id].state = progress.state
            owners = self._backend.block_owners(self._live)
            if owners is not None:
                self._block_map = owners
                self._window_blocks = self._backend.window_blocks()

    # ----- window thread -------------------------------------------------------------------------

    def rows(self) -> list[RequestRow]:
        with self._lock:
            return [copy.copy(row) for row in self._rows.values()]

    def row(self, request_id: str) -> RequestRow | None:
        with self._lock:
            row = self._rows.get(request_id)
            return copy.deepcopy(row) if row else None

    def block_map(self) -> np.ndarray:
        with self._lock:
            return self._block_map.copy()

    def window_blocks(self) -> np.ndarray:
        with self._lock:
            return self._window_blocks.copy()

    def __len__(self) -> int:
        """Requests sent."""
        with self._lock:
            return len(self._rows)

    def num_in_flight(self) -> int:
        """Requests sent and not ended yet."""
        with self._lock:
            return len(self._live)

    def num_waiting(self) -> int:
        """Requests sent that wait for a step (as last read: states are refreshed at a bounded rate)."""
        with self._lock:
            return sum(self._rows[request_id].state in WAITING_STATES for request_id in self._live)
