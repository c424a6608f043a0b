"""The window's copy of the step traces, from the engine thread to the Step panel.

Kept since the engine was loaded (block state carries over from one run to the next, so a replay
must start where the cache was empty): the newest `capacity` steps, each as its run-log record
(workbench/step_traces/log.py, about 5 KB at 64 rows), plus the block map replayed to every
CHECKPOINT_STEPS-th step, so the map at any kept step is at most that many steps of block changes
away. Older steps are dropped a checkpoint at a time; the run log keeps them all.

The engine thread calls `add`; the window calls the rest. One lock guards both sides.
"""

from __future__ import annotations

import bisect
import copy
import json
import threading

import numpy as np

from engine.requests.step_trace import BlockChange, StepTrace
from workbench.step_traces.block_replay import BlockReplay
from workbench.step_traces.log import read_trace, trace_record
from workbench.step_traces.text import request_events

CHECKPOINT_STEPS = 500
CAPACITY_STEPS = 10_000  # at most some 50 MB of records at 64 rows a step; minutes to an hour of a window's run


class TraceStore:
    def __init__(self, num_blocks: int, capacity: int = CAPACITY_STEPS):
        self._lock = threading.Lock()
        self._capacity = capacity
        self._records: list[str] = []  # JSON, one per kept step, oldest first
        self._changes: list[tuple[int, list[BlockChange], list[int]]] = []  # the same steps' block changes, for replay
        self._end_times: list[float] = []  # engine clock
        self._first_step = 0  # the oldest kept step; engine steps are consecutive, so index i is step first + i
        self._head = BlockReplay(num_blocks)  # the map after the newest step
        self._checkpoints: dict[int, BlockReplay] = {}  # step -> the map after it
        self._base = BlockReplay(num_blocks)  # the map before the oldest kept step

    # ----- engine thread -------------------------------------------------------------------------

    def add(self, trace: StepTrace) -> None:
        record = json.dumps(trace_record(trace, full=True))
        changes = (trace.step, [*trace.released_before, *trace.block_changes], trace.registered)
        with self._lock:
            if not self._records:
                self._first_step = trace.step
            self._records.append(record)
            self._changes.append(changes)
            self._end_times.append(trace.time_s)
            self._head.apply_changes(*changes)
            if len(self._records) % CHECKPOINT_STEPS == 0:
                self._checkpoints[trace.step] = copy.deepcopy(self._head)
            if len(self._records) > self._capacity + CHECKPOINT_STEPS:
                self._drop_oldest(CHECKPOINT_STEPS)

    def _drop_oldest(self, count: int) -> None:
        """Forget the oldest `count` steps; the base becomes the checkpoint after them."""
        last_dropped = self._first_step + count - 1
        self._base = self._checkpoints.pop(last_dropped)
        for items in (self._records, self._changes, self._end_times):
            del items[:count]
        self._first_step += count
        self._checkpoints = {step: replay for step, replay in self._checkpoints.items() if step > last_dropped}

    # ----- window thread -------------------------------------------------------------------------

    def step_range(self) -> tuple[int, int] | None:
        """The first and last step kept, or None before the first step."""
        with self._lock:
            return (self._first_step, self._first_step + len(self._records) - 1) if self._records else None

    def nearest_step(self, time_s: float) -> int | None:
        """The step whose end is nearest to `time_s` (engine clock)."""
        with self._lock:
            if not self._records:
                return None
            index = bisect.bisect_left(self._end_times, time_s)
            candidates = [i for i in (index - 1, index) if 0 <= i < len(self._records)]
            return self._first_step + min(candidates, key=lambda i: abs(self._end_times[i] - time_s))

    def trace(self, step: int) -> StepTrace | None:
        with self._lock:
            index = self._index(step)
            record = self._records[index] if index is not None else None
        return read_trace(json.loads(record)) if record is not None else None

    def owners_at(self, step: int, rows: dict[str, int]) -> np.ndarray | None:
        """The block map right after `step` (`rows`: request id -> row number, as the live map)."""
        replay = self.replay_at(step)
        return replay.owners(rows) if replay is not None else None

    def replay_at(self, step: int) -> BlockReplay | None:
        with self._lock:
            index = self._index(step)
            if index is None:
                return None
            checkpoint = max(
                (kept for kept in self._checkpoints if kept <= step), default=None
            )  # the nearest at or before it
            start, replay = (
                (0, self._base)
                if checkpoint is None
                else (checkpoint - self._first_step + 1, self._checkpoints[checkpoint])
            )
            replay = copy.deepcopy(replay)
            for changes in self._changes[start : index + 1]:
                replay.apply_changes(*changes)
            return replay

    def traces_between(self, start_time: float, end_time: float) -> list[StepTrace]:
        """The kept steps that ended within [start_time, end_time] (engine clock), decoded."""
        with self._lock:
            low, high = bisect.bisect_left(self._end_times, start_time), bisect.bisect_right(self._end_times, end_time)
            records = self._records[low:high]
        return [read_trace(json.loads(record)) for record in records]

    def steps_touching(self, request_id: str) -> list[tuple[int, float]]:
        """(step, end time) of every kept step whose trace names the request."""
        needle = json.dumps(request_id)
        with self._lock:
            first, kept = self._first_step, list(zip(self._end_times, self._records))
        # The cheap substring test first; then what the step did to or for the request, not only a mention in a reason.
        return [
            (first + index, end)
            for index, (end, record) in enumerate(kept)
            if needle in record and request_events(read_trace(json.loads(record)), request_id)
        ]

    def _index(self, step: int) -> int | None:
        if not self._first_step <= step < self._first_step + len(self._records):
            return None
        return step - self._first_step
