"""The one rule every traffic source follows to fit a request into the model's context: the
prompt is cut to leave room for at least one output token (and the token after it), then the
output to what the context leaves. Synthetic lengths, ShareGPT prompts and replies, session
turns, trace rows and injected requests all go through `fit_to_context`, and the run log keeps
whether it cut anything (`PlannedRequest.clipped`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContextFit:
    prompt_tokens: int
    max_tokens: int
    clipped: bool  # either length was cut


def prompt_room(max_model_len: int) -> int:
    """The longest prompt that leaves room for one output token."""
    return max_model_len - 2


def fit_to_context(prompt_tokens: int, output_tokens: int, max_model_len: int) -> ContextFit:
    prompt = min(prompt_tokens, prompt_room(max_model_len))
    output = max(1, min(output_tokens, max_model_len - prompt - 1))
    return ContextFit(prompt, output, (prompt, output) != (prompt_tokens, output_tokens))
