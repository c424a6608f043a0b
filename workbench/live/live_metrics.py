"""`LiveMetrics`: the GUI thread's own copy of a MetricsStore, brought up to date with only the
rows added since the last frame. A frame then costs O(new data) to fetch, however long the run,
and the engine thread holds the store's lock only while those few rows are copied.
"""

from __future__ import annotations

import numpy as np

from workbench.live.metrics_store import (
    REQUEST_FIELDS,
    STEP_COUNTERS,
    STEP_FIELDS,
    STEP_LINES,
    MetricsSnapshot,
    MetricsStore,
)
from workbench.live.step_overview import GrowableColumn, StepOverview


class LiveMetrics:
    def __init__(self, store: MetricsStore):
        self.store = store
        self._steps_read = self._requests_read = 0
        self.steps = StepOverview(STEP_LINES, STEP_COUNTERS, capacity=store.step_capacity)
        self._reset_requests()

    def _reset_requests(self) -> None:
        self.requests: dict[str, GrowableColumn] = {}
        self.request_tags: list[str] = []
        self.request_ids: list[str] = []

    def refresh(self) -> bool:
        """Read the rows added since the last call; False if there were none."""
        new = self.store.rows_since(self._steps_read, self._requests_read)
        if (new.steps_count, new.requests_count) == (self._steps_read, self._requests_read):
            return False
        self._steps_read, self._requests_read = new.steps_count, new.requests_count
        self.steps.extend(new.steps)
        self._extend_requests(new.requests, new.request_tags, new.request_ids)
        return True

    def _extend_requests(self, requests: dict[str, np.ndarray], tags: list[str], ids: list[str]) -> None:
        """At most the store's capacity is kept: past it the older half is dropped, as the store's ring would."""
        held = len(self.request_ids)
        if held + len(ids) > self.store.request_capacity and held:
            kept = self.store.request_capacity // 2
            older = {name: column.view()[-kept:].copy() for name, column in self.requests.items()}
            older_tags, older_ids = self.request_tags[-kept:], self.request_ids[-kept:]
            self._reset_requests()
            self._extend_requests(older, older_tags, older_ids)
        for name, values in requests.items():
            self.requests.setdefault(name, GrowableColumn()).extend(values)
        self.request_tags += tags
        self.request_ids += ids

    def snapshot(self) -> MetricsSnapshot:
        """Views of this copy, not copies (later refreshes append past them, or drop them and
        start new columns); the overview is the live one."""
        store = self.store
        return MetricsSnapshot(
            steps={name: self.steps.column(name) for name in STEP_FIELDS},
            requests={
                name: self.requests[name].view() if name in self.requests else np.zeros(0) for name in REQUEST_FIELDS
            },
            request_tags=self.request_tags,
            request_ids=self.request_ids,
            window_s=store.window_s,
            kv_capacity_tokens=store.kv_capacity_tokens,
            kv_cache_bytes=store.kv_cache_bytes,
            slo=store.slo,
            requests_arrived=max(store.requests_sent, len(self.request_ids)),
            beside_compile=store.beside_compile,
            step_overview=self.steps,
        )
