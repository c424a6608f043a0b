"""A queue of waiting sequences, served by arrival (fcfs) or by (priority, arrival)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from engine.requests.sequence import Sequence


class WaitQueue:
    """A heap keyed by (priority, arrival index). A preempted sequence keeps its key, so it goes
    back ahead of everything that arrived after it, the front of the line under fcfs.

    A removed sequence (an abort) stays in the heap, marked, until it reaches the top: removing
    from the middle of a heap costs a scan and a re-heapify per abort, quadratic for the window's
    Stop that drops tens of thousands (docs/measurements.md, "Dropping a queue")."""

    def __init__(self, by_priority: bool):
        self.by_priority = by_priority
        self._heap: list[tuple[int, int, Sequence]] = []
        self._removed: set[Sequence] = set()  # in the heap, no longer waiting

    def _entry(self, seq: Sequence) -> tuple[int, int, Sequence]:
        return (seq.priority if self.by_priority else 0, seq.arrival_index, seq)

    def push(self, seq: Sequence) -> None:
        heapq.heappush(self._heap, self._entry(seq))

    def peek(self) -> Sequence:
        self._drop_removed_head()
        return self._heap[0][2]

    def pop(self) -> Sequence:
        self._drop_removed_head()
        return heapq.heappop(self._heap)[2]

    def remove(self, seq: Sequence) -> None:
        """Take a waiting sequence out of the line (it must be in it)."""
        self._removed.add(seq)

    def _drop_removed_head(self) -> None:
        while self._heap[0][2] in self._removed:
            self._removed.discard(heapq.heappop(self._heap)[2])

    def __len__(self) -> int:
        return len(self._heap) - len(self._removed)

    def __iter__(self) -> Iterator[Sequence]:
        return (entry[2] for entry in sorted(self._heap, key=lambda entry: entry[:2]) if entry[2] not in self._removed)
