"""`Sequence`: one request's state as it moves through the engine.

All token ids (prompt then output) live in one list; `num_computed_tokens` says how many of them
already have K/V in the cache. A step computes the rest (or a chunk of it) and, once every known
token is computed, samples the next one. Prefill, decode and recompute after preemption are all
this one rule.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from engine.requests.metrics import RequestMetrics
from engine.requests.sampling_params import SamplingParams

if TYPE_CHECKING:
    from engine.requests.detokenizer import IncrementalDetokenizer


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    STOP = "stop"  # an end-of-sequence token, a stop token id or a stop string
    LENGTH = "length"  # max_tokens, or the model's context is full
    ABORT = "abort"
    REJECTED = "rejected"  # could never run (too long for the context or the cache)
    ERROR = "error"  # a step failed while it was unfinished (engine/core.py)


class StopCause(str, enum.Enum):
    """What ended a request that stopped or ran to its length, typed (RequestMetrics.stop_cause),
    so that a report counts causes without reading the detail's words. The values are the
    report's labels."""

    END_OF_SEQUENCE = "end-of-sequence token"
    STOP_TOKEN = "stop token"
    STOP_STRING = "stop string"
    MAX_TOKENS = "max_tokens"
    CONTEXT_FULL = "context full"
    KV_CACHE_FULL = "the whole KV cache"


class Sequence:
    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
        *,
        arrival_index: int,
        seed: int,
        priority: int = 0,
    ):
        self.request_id = request_id
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.priority = priority
        self.arrival_index = arrival_index  # tie-breaker that keeps arrival order in the queues
        self.seed = seed
        self.status = SequenceStatus.WAITING
        self.is_long = False  # set by the scheduler: waits in the long-prompt queue
        self.num_computed_tokens = 0
        self.proposal_limit: int | None = None  # the heuristic speculation schedule's, once it has speculated
        # One block table per KV group (engine/model_spec/kv_layout.py) while it holds blocks; empty otherwise.
        self.block_tables: list[list[int]] = []
        # Prefix hashes of this sequence's full, computed blocks, in block order.
        self.block_hashes: list[bytes] = []
        self.finish_reason: FinishReason | None = None
        # The output's text and stop strings, a token at a time (set by the engine when the model
        # has a tokenizer).
        self.detokenizer: IncrementalDetokenizer | None = None
        self.metrics = RequestMetrics(arrival_time=arrival_time, num_prompt_tokens=self.num_prompt_tokens)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_prefilling(self) -> bool:
        """Still working through its prompt (or through a recompute after preemption)."""
        return self.num_uncomputed_tokens > 1 or self.num_computed_tokens == 0

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def state(self) -> str:
        """The life-cycle state the workbench shows."""
        if self.status is SequenceStatus.FINISHED:
            reason = self.finish_reason
            return {FinishReason.ABORT: "aborted", FinishReason.REJECTED: "rejected"}.get(reason, "finished")
        if self.status is SequenceStatus.WAITING:
            if self.metrics.preemptions:
                return "preempted"
            return "waiting_long" if self.is_long else "waiting"
        return "prefilling" if self.is_prefilling else "decoding"

    def mark_finished(self, reason: FinishReason, now: float, detail: str = "", cause: StopCause | None = None) -> None:
        self.status = SequenceStatus.FINISHED
        self.finish_reason = reason
        self.metrics.finish_reason = reason.value
        self.metrics.finish_detail = detail
        self.metrics.stop_cause = cause.value if cause is not None else None
        self.metrics.finish_time = now

    def keep_tokens(self, length: int) -> None:
        """Drop the tokens after the first `length` (a stop among tokens one step emitted)."""
        dropped = self.num_tokens - length
        if dropped > 0:
            del self.token_ids[length:]
            del self.metrics.token_times[len(self.metrics.token_times) - dropped :]

    def append_token(self, token_id: int, now: float) -> None:
        self.token_ids.append(token_id)
        if self.metrics.first_token_time is None:
            self.metrics.first_token_time = now
        self.metrics.token_times.append(now)
