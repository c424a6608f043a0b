"""A queue of waiting sequences, served by arrival (fcfs) or by (priority, arrival)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from engine.sequence import Sequence


class WaitQueue:
    """A heap keyed by (priority, arrival index). A preempted sequence keeps its key, so it goes
    back ahead of everything that arrived after it, the front of the line under fcfs."""

    def __init__(self, by_priority: bool):
        self.by_priority = by_priority
        self._heap: list[tuple[int, int, Sequence]] = []

    def _entry(self, seq: Sequence) -> tuple[int, int, Sequence]:
        return (seq.priority if self.by_priority else 0, seq.arrival_index, seq)

    def push(self, seq: Sequence) -> None:
        heapq.heappush(self._heap, self._entry(seq))

    def peek(self) -> Sequence:
        return self._heap[0][2]

    def pop(self) -> Sequence:
        return heapq.heappop(self._heap)[2]

    def remove(self, seq: Sequence) -> None:
        self._heap.remove(self._entry(seq))
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Sequence]:
        return (entry[2] for entry in sorted(self._heap, key=lambda entry: entry[:2]))
