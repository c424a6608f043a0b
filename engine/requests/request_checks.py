"""What `LLMEngine.add_request` refuses, with one line naming the value and what was expected: no
step may fail for a reason these checks could have caught (docs/reliability.md)."""

from __future__ import annotations

import math
import numbers
from pathlib import Path

from engine.errors import EngineError
from engine.loading.tokenizer import Tokenizer
from engine.requests.sampling_params import SamplingParams


def check_request(
    params: object, priority: object, arrival_time: object, request_id: object, now: float, vocab_size: int
) -> None:
    """The sampling parameters, priority, arrival time (on the engine clock, no later than `now`)
    and a caller's request id."""
    if not isinstance(params, SamplingParams):
        raise EngineError(f"params: expected SamplingParams, got {type(params).__name__}")
    if isinstance(priority, bool) or not isinstance(priority, numbers.Integral):
        raise EngineError(f"priority: expected an integer, got {priority!r}")
    if arrival_time is not None and not (
        isinstance(arrival_time, numbers.Real) and math.isfinite(arrival_time) and arrival_time <= now
    ):
        raise EngineError(
            f"arrival_time: expected a finite number of seconds on the engine clock, no later than now "
            f"({now:.3f}), got {arrival_time!r}"
        )
    if request_id is not None and not isinstance(request_id, str):
        raise EngineError(f"request_id: expected a string, got {request_id!r}")
    if params.top_k > vocab_size:
        raise EngineError(f"top_k: expected at most the vocabulary size ({vocab_size}), got {params.top_k}")


def prompt_token_ids(prompt: object, tokenizer: Tokenizer | None, vocab_size: int, model_path: Path | str) -> list[int]:
    """A text prompt encoded, or token ids checked against the vocabulary."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise EngineError(f"{model_path}: this model has no tokenizer; pass token ids instead of text")
        return tokenizer.encode(prompt)
    try:
        token_ids = list(prompt)
    except TypeError:
        raise EngineError(f"prompt: expected a text or a list of token ids, got {type(prompt).__name__}") from None
    bad = [
        token
        for token in token_ids
        if isinstance(token, bool) or not isinstance(token, numbers.Integral) or not 0 <= token < vocab_size
    ]
    if bad:
        raise EngineError(f"prompt: token ids must be integers in [0, {vocab_size}), got {bad[:5]}")
    return [int(token) for token in token_ids]
