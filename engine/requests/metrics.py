"""What the engine measures: one `StepStats` per step, one `RequestMetrics` per request, and a
percentile helper that never drops its n. Times are seconds on the engine's clock; properties
ending in `_ms` are milliseconds."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class StepStats:
    time_s: float  # engine clock at the end of the step
    step_duration_s: float
    prefill_tokens: int
    decode_tokens: int  # decode rows (one token each); accepted_tokens are emitted beside them
    num_seqs: int  # sequences in this step's batch
    kv_blocks_used: int  # blocks referenced by at least one sequence
    kv_blocks_total: int
    kv_blocks_cached_free: int  # free blocks still holding a reusable prefix (see BlockManager)
    num_waiting: int
    num_waiting_long: int
    num_running: int
    preemptions_total: int
    rejections_total: int
    prefix_cache_hit_tokens_total: int
    prefix_cache_query_tokens_total: int
    decode_compiled: bool = False  # ran as the compiled decode graph (engine.executor.DecodeGraph)
    # Began while the decode graph compiled in the background: it ran eagerly, beside the compiler
    # for the cores, 5 to 65 times as slow as compiled (docs/compiled-decode.md): its time measures
    # the warm-up, not the engine. Run logs written before this field read as False.
    beside_compile: bool = False
    # Speculative decoding (engine/scheduling/speculation.py): tokens proposed in this step, and
    # of those the model agreed with. Run logs written before it read as 0.
    speculating_rows: int = 0  # decode rows that proposed tokens
    proposed_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def kv_usage_perc(self) -> float:
        return 100.0 * self.kv_blocks_used / self.kv_blocks_total


# The finish reason a run's report gives requests still waiting or running when the run ended.
UNFINISHED = "unfinished"
# The finish reasons of a request that ended as asked (latency percentiles cover these only).
FINISHED_REASONS = ("stop", "length")


@dataclass
class RequestMetrics:
    arrival_time: float
    num_prompt_tokens: int
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    # When each output token became available to the caller (end of the step that sampled it).
    token_times: list[float] = field(default_factory=list)
    preemptions: int = 0
    finish_reason: str | None = None  # stop, length, abort, rejected; in run reports also UNFINISHED
    finish_detail: str = ""  # e.g. why a request was rejected
    # For stop and length: what stopped it (engine.sequence.StopCause's value); None otherwise, and
    # from a server, which does not say.
    stop_cause: str | None = None
    # Where it ran in a deployment of several instances (engine/deployment.py); None on
    # one engine. Under prefill/decode disaggregation: its prefill instance, when its K/V left it
    # (after the first token, once the link was free), when the K/V reached `instance` (its decode
    # instance), and when that instance first scheduled it.
    instance: int | None = None
    prefill_instance: int | None = None
    kv_transfer_start_time: float | None = None
    kv_ready_time: float | None = None
    decode_scheduled_time: float | None = None
    # Speculative decoding: the steps in which it speculated, the tokens proposed in them, and of
    # those the model agreed with (each accepted token is a decode step saved).
    speculative_steps: int = 0
    proposed_tokens: int = 0
    accepted_tokens: int = 0

    def record_speculation(self, proposed: int, accepted: int) -> None:
        self.speculative_steps += 1
        self.proposed_tokens += proposed
        self.accepted_tokens += accepted

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_times)

    @property
    def queue_time_ms(self) -> float | None:
        return _elapsed_ms(self.arrival_time, self.first_scheduled_time)

    @property
    def ttft_ms(self) -> float | None:
        return _elapsed_ms(self.arrival_time, self.first_token_time)

    @property
    def e2e_ms(self) -> float | None:
        last = self.token_times[-1] if self.token_times else None
        return _elapsed_ms(self.arrival_time, last)

    @property
    def tpot_ms(self) -> float | None:
        """(e2e - TTFT) / (output tokens - 1); undefined for fewer than two tokens."""
        if self.num_output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.num_output_tokens - 1)

    @property
    def itl_ms(self) -> list[float]:
        times = self.token_times
        return [1000.0 * (later - earlier) for earlier, later in zip(times, times[1:])]


def _elapsed_ms(start: float, end: float | None) -> float | None:
    return None if end is None else 1000.0 * (end - start)


@dataclass(frozen=True)
class Percentiles:
    """None for every statistic when n = 0: there is nothing to summarise (and JSON has no NaN)."""

    n: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    def __str__(self) -> str:
        if self.n == 0:
            return "no values yet (n=0)"
        return f"p50 {self.p50:.1f} / p90 {self.p90:.1f} / p99 {self.p99:.1f} (mean {self.mean:.1f}, n={self.n})"


def percentiles(values) -> Percentiles:
    """Mean and p50/p90/p99 (linear interpolation) of the values that are not None."""
    present = np.asarray([value for value in values if value is not None], dtype=np.float64)
    if present.size == 0:
        return Percentiles(0, None, None, None, None)
    p50, p90, p99 = np.percentile(present, [50, 90, 99])
    return Percentiles(int(present.size), float(present.mean()), float(p50), float(p90), float(p99))
