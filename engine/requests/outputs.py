"""What the engine hands back: per-request deltas, per-step statistics and the step's trace."""

from __future__ import annotations

from dataclasses import dataclass

from engine.requests.metrics import RequestMetrics, StepStats
from engine.requests.step_trace import StepTrace


@dataclass
class RequestOutput:
    request_id: str
    new_token_ids: list[int]  # tokens produced by this step (empty for rejections and aborts)
    token_ids: list[int]  # all output tokens so far
    finished: bool
    finish_reason: str | None  # stop, length, abort, rejected, error
    text: str | None  # the decoded output, once finished (None for token-id-only models)
    metrics: RequestMetrics
    # Text decoded since the last output that can no longer be the start of a stop string ("" for
    # token-id-only models): a stream's next piece, without decoding the whole output again.
    new_text: str = ""


@dataclass
class StepResult:
    outputs: list[RequestOutput]
    stats: StepStats
    # Tokens each request computed in this step (prefill chunk size, or 1 for a decode and its
    # speculative proposals).
    scheduled: dict[str, int]
    trace: StepTrace | None = None  # the step's causal record (EngineConfig.step_trace)
