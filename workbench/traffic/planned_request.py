"""A request as its traffic means it: what the run log keeps beside its outcome."""

from __future__ import annotations

from dataclasses import dataclass

from engine.requests.sampling_params import SamplingParams
from workbench.backends.protocol import Chat


@dataclass(frozen=True)
class PlannedRequest:
    """A request as the traffic means it: what the run log keeps beside its outcome (`record`), so
    a report can say "asked for N, got M" and a replay can send it again as it was planned."""

    arrival_s: float | None  # seconds after the run starts; None = closed loop (sent when a slot frees)
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams  # built once, here; the runner sends them as they are
    tag: str
    source: str  # a traffic source (PROMPT_SOURCES) or "injected"
    messages: Chat | None = None  # the chat the prompt was templated from (ShareGPT prompts on a chat model)
    session: int | None = None  # sessions: which one it is a turn of (its next turn follows its end)
    clipped: bool = False  # fit_to_context cut its prompt or output to the model's context

    @property
    def max_tokens(self) -> int:
        return self.params.max_tokens

    def record(self) -> dict:
        """The run log's `planned` entry of this request's line."""
        return {
            "prompt_tokens": len(self.prompt_token_ids),
            "max_tokens": self.params.max_tokens,
            "source": self.source,
            "session": self.session,
            "clipped": self.clipped,
        }
