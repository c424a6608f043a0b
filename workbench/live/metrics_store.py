"""`MetricsStore`: bounded numpy ring buffers of step and request metrics, filled by the engine
loop and read as consistent snapshots by the plots (live in the GUI, once for PNG reports).

Writers and readers may be on different threads; one lock guards both. Memory is bounded by the
capacities whatever the run length: the oldest entries are overwritten.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from engine.requests.metrics import FINISHED_REASONS, RequestMetrics, StepStats
from workbench.live.step_overview import StepOverview
from workbench.runs.run_log import RunLog, request_metrics, step_stats
from workbench.traffic.scenario import SLO

STEP_LINES = (  # per-step series drawn as lines
    "kv_used_perc",
    "kv_used_plus_cached_perc",
    "prefix_hit_perc",
    "waiting",
    "waiting_long",
    "running",
    "prefill_tokens",
    "decode_tokens",
    "proposed_tokens",
    "accepted_tokens",
    "prefill_tok_s",
    "decode_tok_s",
)
STEP_COUNTERS = ("preemptions_total", "rejections_total")  # cumulative: drawn as markers where they rise
STEP_FIELDS = ("time_s", "start_s", *STEP_LINES, *STEP_COUNTERS)
REQUEST_FIELDS = (
    "finish_s",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "queue_ms",
    "prompt_tokens",
    "output_tokens",
    "finished",
    "meets_slo",
)


_ROWS_FREE_FOR_A_COPY = 10_000  # appends a copy outside the lock may overlap, with room to spare


class _Ring:
    """Fixed-capacity float64 columns; `ordered()` returns them oldest first."""

    def __init__(self, fields: tuple[str, ...], capacity: int):
        self.data = {name: np.full(capacity, np.nan) for name in fields}
        self.capacity, self.count = capacity, 0

    def append(self, values: dict[str, float]) -> None:
        index = self.count % self.capacity
        for name, column in self.data.items():
            column[index] = values[name]
        self.count += 1

    @property
    def wrapped(self) -> bool:
        return self.count > self.capacity

    @property
    def filling(self) -> bool:
        """Far from wrapping: rows below the count stay as they are for a while yet."""
        return self.count < self.capacity - _ROWS_FREE_FOR_A_COPY

    def positions_since(self, since: int) -> np.ndarray:
        """Where the rows from `since` on lie, or from the oldest still held."""
        return np.arange(max(since, self.count - self.capacity, 0), self.count) % self.capacity

    def rows_at(self, positions: np.ndarray) -> dict[str, np.ndarray]:
        return {name: column[positions] for name, column in self.data.items()}

    def ordered(self, count: int | None = None) -> dict[str, np.ndarray]:
        """The columns oldest first; `count`: the first rows only (of a ring not wrapped yet)."""
        if not self.wrapped:  # copy only what is filled
            return {name: column[: self.count if count is None else count].copy() for name, column in self.data.items()}
        start = self.count % self.capacity
        return {name: np.concatenate([column[start:], column[:start]]) for name, column in self.data.items()}


@dataclass
class MetricsSnapshot:
    steps: dict[str, np.ndarray]  # per step, at its end (time_s) and start (start_s), in seconds since the run started
    requests: dict[str, np.ndarray]  # per ended request, at its finish time
    request_tags: list[str]
    request_ids: list[str]
    window_s: float  # of the token rates, steps["prefill_tok_s"] and steps["decode_tok_s"]
    kv_capacity_tokens: int
    kv_cache_bytes: int
    slo: SLO
    requests_arrived: int = 0  # sent so far, ended or not: goodput's n, as in the report
    # Seconds (first start, last end) of the steps run eagerly beside the decode graph's compile
    # (StepStats.beside_compile: contiguous, at the start of a run begun during the warm-up).
    beside_compile: tuple[float, float] | None = None
    step_overview: StepOverview | None = field(default=None, repr=False)  # built from `steps` when first drawn

    @property
    def overview(self) -> StepOverview:
        """The step series binned for drawing (workbench/live/step_overview.py)."""
        if self.step_overview is None:
            self.step_overview = StepOverview.of(self.steps, STEP_LINES, STEP_COUNTERS)
        return self.step_overview

    @property
    def prefill_tok_s(self) -> np.ndarray:
        return self.steps["prefill_tok_s"]

    @property
    def decode_tok_s(self) -> np.ndarray:
        return self.steps["decode_tok_s"]

    @property
    def goodput(self) -> tuple[int, int]:
        """(finished requests meeting every SLO, every request that arrived), as in the run
        report: a rejected, aborted or still unfinished request counts as a miss."""
        finished = self.requests["finished"] == 1
        meeting = int((self.requests["meets_slo"][finished] == 1).sum())
        return meeting, max(self.requests_arrived, int(finished.size))

    def finished_latencies(self, key: str) -> np.ndarray:
        """One latency column (`ttft`, `tpot`, `e2e`) over the finished requests (stop or length)
        that have it: what the report's percentiles cover."""
        values = self.requests[f"{key}_ms"][self.requests["finished"] == 1]
        return values[~np.isnan(values)]


class MetricsStore:
    def __init__(
        self,
        start_time: float,
        *,
        kv_capacity_tokens: int = 0,
        kv_cache_bytes: int = 0,
        step_capacity: int = 200_000,
        request_capacity: int = 100_000,
        window_s: float = 2.0,
        slo: SLO | None = None,
    ):
        self.start_time = start_time
        self.slo = slo or SLO()  # fixed when a run starts; goodput is judged against it
        self.kv_capacity_tokens, self.kv_cache_bytes = kv_capacity_tokens, kv_cache_bytes
        self.window_s = window_s
        self.step_capacity, self.request_capacity = step_capacity, request_capacity
        self._steps = _Ring(STEP_FIELDS, step_capacity)
        self._requests = _Ring(REQUEST_FIELDS, request_capacity)
        # Tokens per second over the window_s seconds ending at each step, computed as steps
        # arrive (a step's rate never changes afterwards): the steps inside the window with the
        # running token totals, and the totals just before the window.
        self._in_window: deque[tuple[float, float, float]] = deque()
        self._totals = self._before_window = (0.0, 0.0)
        self._sent = 0  # requests sent (arrived) in this run, ended or not
        self.beside_compile: tuple[float, float] | None = None  # as MetricsSnapshot's
        self._tags: list[str] = [""] * request_capacity
        self._ids: list[str] = [""] * request_capacity
        self._lock = threading.Lock()

    @classmethod
    def from_run_log(cls, log: RunLog) -> MetricsStore:
        """A finished (or saved) run replayed into a store: for its report images and for the
        window's Open run and Baseline."""
        engine = log.header["engine"]
        store = cls(
            log.header["start_time"],
            kv_capacity_tokens=engine.get("kv_capacity_tokens") or 0,  # a server may not say
            kv_cache_bytes=engine.get("kv_cache_bytes") or 0,
            step_capacity=max(len(log.steps), 1),
            request_capacity=max(len(log.requests), 1),
            slo=SLO(**log.header["scenario"]["slo"]),
        )
        for record in log.steps:
            store.add_step(step_stats(record))
        for record in log.requests:
            store.add_request(request_metrics(record), record["tag"], record["request_id"])
        return store

    def add_step(self, stats: StepStats) -> None:
        total = stats.kv_blocks_total
        now = stats.time_s - self.start_time
        # Output tokens: each decode row's, and the speculative proposals accepted beside them.
        prefill_rate, decode_rate = self._windowed_rates(
            now, stats.prefill_tokens, stats.decode_tokens + stats.accepted_tokens
        )
        values = {
            "time_s": now,
            "start_s": stats.time_s - stats.step_duration_s - self.start_time,
            "kv_used_perc": 100.0 * stats.kv_blocks_used / total,
            "kv_used_plus_cached_perc": 100.0 * (stats.kv_blocks_used + stats.kv_blocks_cached_free) / total,
            # The run's prefix-cache hit rate so far (the report's prefix_cache_hit_perc at the end);
            # 0 before any prompt token was looked up (NaN marks a row not yet written).
            "prefix_hit_perc": (
                100.0 * stats.prefix_cache_hit_tokens_total / stats.prefix_cache_query_tokens_total
                if stats.prefix_cache_query_tokens_total
                else 0.0
            ),
            "waiting": stats.num_waiting,
            "waiting_long": stats.num_waiting_long,
            "running": stats.num_running,
            "prefill_tokens": stats.prefill_tokens,
            "decode_tokens": stats.decode_tokens,
            "proposed_tokens": stats.proposed_tokens,
            "accepted_tokens": stats.accepted_tokens,
            "preemptions_total": stats.preemptions_total,
            "rejections_total": stats.rejections_total,
            "prefill_tok_s": prefill_rate,
            "decode_tok_s": decode_rate,
        }
        if stats.beside_compile:
            began = values["start_s"] if self.beside_compile is None else self.beside_compile[0]
            self.beside_compile = (began, now)  # one assignment: a snapshot reads either span whole
        with self._lock:
            self._steps.append(values)

    def _windowed_rates(self, now: float, prefill_tokens: int, decode_tokens: int) -> tuple[float, float]:
        """Always divided by the full window, so the first seconds read low rather than spiking
        on a tiny denominator."""
        self._totals = (self._totals[0] + prefill_tokens, self._totals[1] + decode_tokens)
        self._in_window.append((now, *self._totals))
        while self._in_window[0][0] <= now - self.window_s:
            _, *before = self._in_window.popleft()
            self._before_window = tuple(before)
        return (
            (self._totals[0] - self._before_window[0]) / self.window_s,
            (self._totals[1] - self._before_window[1]) / self.window_s,
        )

    @property
    def requests_sent(self) -> int:
        return self._sent

    def request_sent(self) -> None:
        """A request arrived: goodput counts it from now on, ended or not."""
        with self._lock:
            self._sent += 1

    def add_request(self, metrics: RequestMetrics, tag: str = "", request_id: str = "") -> None:
        finish = metrics.finish_time if metrics.finish_time is not None else self.start_time
        values = {
            "finish_s": finish - self.start_time,
            "ttft_ms": _or_nan(metrics.ttft_ms),
            "tpot_ms": _or_nan(metrics.tpot_ms),
            "e2e_ms": _or_nan(metrics.e2e_ms),
            "queue_ms": _or_nan(metrics.queue_time_ms),
            "prompt_tokens": metrics.num_prompt_tokens,
            "output_tokens": metrics.num_output_tokens,
            "finished": float(metrics.finish_reason in FINISHED_REASONS),
            "meets_slo": float(self.slo.met_by(metrics)),
        }
        with self._lock:
            slot = self._requests.count % self._requests.capacity
            self._tags[slot], self._ids[slot] = tag, request_id
            self._requests.append(values)

    def rows_since(self, steps_since: int, requests_since: int) -> NewRows:
        """Copies of the steps and requests added since the given counts: O(new rows) under the
        lock, for a reader that keeps its own copy (workbench/live/live_metrics.py)."""
        with self._lock:
            steps = self._steps.rows_at(self._steps.positions_since(steps_since))
            slots = self._requests.positions_since(requests_since)
            tags, ids = [self._tags[slot] for slot in slots], [self._ids[slot] for slot in slots]
            return NewRows(steps, self._requests.rows_at(slots), tags, ids, self._steps.count, self._requests.count)

    def snapshot(self) -> MetricsSnapshot:
        """While the rings are far from wrapping, rows below the counts read under the lock are not
        written again: they are copied after the lock is released, so the engine thread does not
        wait for a copy of the whole run (at 500,000 steps, milliseconds each frame)."""
        with self._lock:
            filling = self._steps.filling and self._requests.filling
            step_count, request_count, sent = self._steps.count, self._requests.count, self._sent
            if not filling:
                steps, requests = self._steps.ordered(), self._requests.ordered()
                tags, ids = _in_order(self._tags, self._requests), _in_order(self._ids, self._requests)
        if filling:
            steps, requests = self._steps.ordered(step_count), self._requests.ordered(request_count)
            tags, ids = self._tags[:request_count], self._ids[:request_count]
        return MetricsSnapshot(
            steps=steps,
            requests=requests,
            request_tags=tags,
            request_ids=ids,
            window_s=self.window_s,
            kv_capacity_tokens=self.kv_capacity_tokens,
            kv_cache_bytes=self.kv_cache_bytes,
            slo=self.slo,
            requests_arrived=max(sent, request_count),
            beside_compile=self.beside_compile,
        )


@dataclass
class NewRows:
    steps: dict[str, np.ndarray]
    requests: dict[str, np.ndarray]
    request_tags: list[str]
    request_ids: list[str]
    steps_count: int  # rows ever added, to pass as `since` next time
    requests_count: int


def _in_order(column: list[str], ring: _Ring) -> list[str]:
    """A list kept beside the ring, oldest first (a copy)."""
    start = ring.count % ring.capacity
    return column[start:] + column[:start] if ring.count > ring.capacity else column[: ring.count]


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else value
