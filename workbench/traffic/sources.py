"""The prompt sources, one class each: what a traffic's requests carry and how long they run.

  synthetic  real-text prompts of drawn lengths (`prompt_len`, `output_len`, a shared prefix)
  sharegpt   real ShareGPT questions with their reference replies' lengths
  copying    ShareGPT replies handed back to be repeated: outputs that copy their prompt, the
             shape of code edits and quoting, where speculative prompt lookup pays (drawn lengths
             of output; the prompt is the reply's)
  sessions   multi-turn conversations that come back (workbench/traffic/sessions.py)
  trace      a recorded workload's rows, with their own arrival times (request_trace.py)

Each draws from the traffic's content generator in a fixed order, so a seed gives the same
requests. A new source is a class in `PROMPT_SOURCES`
(docs/extending.md); nothing else compares their names (tests/test_architecture.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.errors import ConfigError
from workbench.backends.protocol import Chat
from workbench.traffic.arrivals import ARRIVALS
from workbench.traffic.context_fit import ContextFit, fit_to_context, prompt_room
from workbench.traffic.planned_request import PlannedRequest
from workbench.traffic.prompts import PromptMaker
from workbench.traffic.request_trace import TraceRow, TraceWindow, read_trace_rows, select_rows
from workbench.traffic.sessions import Sessions, Turn

# A TrafficProfile (workbench/traffic/profile.py), which imports this registry to check its
# `prompts`: not imported here, so that the two modules do not import each other.
TrafficProfile = Any


@dataclass
class SourceContext:
    """What every source draws with: the profile, the prompt maker, the content generator (one
    stream of the traffic's seed) and the model's context."""

    profile: TrafficProfile
    maker: PromptMaker
    rng: np.random.Generator
    max_model_len: int

    def request(
        self,
        arrival_s: float | None,
        prompt: list[int],
        fit: ContextFit,
        *,
        tag: str = "",
        messages: Chat | None = None,
        session: int | None = None,
    ) -> PlannedRequest:
        profile = self.profile
        return PlannedRequest(
            arrival_s,
            tuple(prompt),
            profile.sampling_params(fit.max_tokens),
            tag or profile.tag,
            profile.prompts,
            messages,
            session,
            fit.clipped,
        )


class PromptSource:
    name: ClassVar[str]
    # Its rows bring their own arrival times and lengths, and end the traffic (num_requests may be
    # 0): the arrival process and the length settings do not apply.
    recorded: ClassVar[bool] = False
    # Whether num_requests says how many requests there will be (sessions' later turns come as
    # earlier ones end: only the run tells).
    counted_by_num_requests: ClassVar[bool] = True
    # The profile's single-valued fields it reads beyond the counts and lengths: the window shows
    # a field for each while it is chosen (workbench/gui/traffic_panel.py).
    settings: ClassVar[tuple[str, ...]] = ()
    # Whether the window offers it in its prompts list; a trace needs its file, which only a
    # preset names.
    offered_in_window: ClassVar[bool] = True

    def __init__(self, context: SourceContext):
        self.context = context
        self.own_arrivals: list[float] | None = None  # arrival times of its own (a trace's rows)
        self.trace_summary: dict | None = None  # a trace's file, rows and clipped count, for the run's header
        self.sessions: Sessions | None = None

    @classmethod
    def check(cls, profile: TrafficProfile) -> None:
        """ConfigError for settings this source cannot use."""

    def next_request(self, arrival_s: float | None) -> PlannedRequest:
        raise NotImplementedError


class SyntheticPrompts(PromptSource):
    name = "synthetic"
    settings = ("shared_prefix_tokens",)

    def __init__(self, context: SourceContext):
        super().__init__(context)
        profile, limit = context.profile, context.max_model_len
        if profile.shared_prefix_tokens > limit - 3:
            raise ConfigError(
                f"shared_prefix_tokens: {profile.shared_prefix_tokens} leaves no room for a prompt and an output "
                f"within max_model_len ({limit} tokens); expected at most {limit - 3}"
            )
        self._prefix: list[int] = []
        if profile.shared_prefix_tokens:
            self._prefix = context.maker.synthetic(profile.shared_prefix_tokens, context.rng)

    def next_request(self, arrival_s: float | None) -> PlannedRequest:
        context, prefix = self.context, self._prefix
        profile, limit, rng = context.profile, context.max_model_len, context.rng
        drawn_prompt = len(prefix) + profile.prompt_len.sample(rng, prompt_room(limit) - len(prefix))
        prompt_len = fit_to_context(drawn_prompt, 1, limit).prompt_tokens
        prompt = prefix + context.maker.synthetic(prompt_len - len(prefix), rng)
        fit = fit_to_context(drawn_prompt, profile.output_len.sample(rng, limit - prompt_len - 1), limit)
        return context.request(arrival_s, prompt, fit)


class SharegptPrompts(PromptSource):
    name = "sharegpt"

    def next_request(self, arrival_s: float | None) -> PlannedRequest:
        context = self.context
        bounds = context.profile.output_len
        prompt, reply_len, messages = context.maker.sharegpt(context.rng)
        # The reference reply's length within output_len's [low, high], then the model's context.
        reply_len = min(max(reply_len, bounds.low), bounds.high or reply_len)
        fit = fit_to_context(len(prompt), reply_len, context.max_model_len)
        if fit.prompt_tokens < len(prompt):  # cut to fit: the chat no longer says what the prompt holds
            prompt, messages = prompt[: fit.prompt_tokens], None
        return context.request(arrival_s, prompt, fit, messages=messages)


class CopyingPrompts(PromptSource):
    name = "copying"

    def next_request(self, arrival_s: float | None) -> PlannedRequest:
        context = self.context
        limit = context.max_model_len
        prompt, messages = context.maker.copying(context.rng, prompt_room(limit))
        fit = fit_to_context(
            len(prompt), context.profile.output_len.sample(context.rng, limit - len(prompt) - 1), limit
        )
        return context.request(arrival_s, prompt, fit, messages=messages)


class SessionPrompts(PromptSource):
    name = "sessions"
    counted_by_num_requests = False
    settings = ("think_time_s", "turns")

    def __init__(self, context: SourceContext):
        super().__init__(context)
        self.sessions = Sessions(context.profile, context.maker, context.rng, context.max_model_len)

    @classmethod
    def check(cls, profile: TrafficProfile) -> None:
        if not ARRIVALS[profile.arrival].open_loop:
            raise ConfigError("arrival: sessions start by an arrival process (poisson, gamma, ...), not closed_loop")

    def next_request(self, arrival_s: float | None) -> PlannedRequest:
        return self.turn_request(self.sessions.start(), arrival_s)

    def follow_up(self, session: int, ended_s: float) -> PlannedRequest | None:
        """A session's next turn, arriving a think time after its previous turn ended at `ended_s`
        (seconds after the start); None once the session is over."""
        turn = self.sessions.next_turn(session)
        return None if turn is None else self.turn_request(turn, ended_s + self.sessions.think_time(session))

    def turn_request(self, turn: Turn, arrival_s: float | None) -> PlannedRequest:
        fit = ContextFit(len(turn.prompt_token_ids), turn.max_tokens, turn.clipped)
        return self.context.request(
            arrival_s, list(turn.prompt_token_ids), fit, messages=turn.messages, session=turn.session
        )


class TracePrompts(PromptSource):
    name = "trace"
    recorded = True
    settings = ("time_scale", "trace_start_s")
    offered_in_window = False

    def __init__(self, context: SourceContext):
        super().__init__(context)
        rows = self._read()
        self._rows = iter(rows)
        self.own_arrivals = [row.arrival_s for row, _ in rows]

    @classmethod
    def check(cls, profile: TrafficProfile) -> None:
        if not profile.trace_file:
            raise ConfigError("trace_file: prompts = 'trace' needs a trace file")

    def _read(self) -> list[tuple[TraceRow, list[int] | None]]:
        """The trace's rows this run replays, each with its text prompt's tokens (None for a
        length); counts the requests whose lengths must be cut to the model's context."""
        context = self.context
        profile, path, limit = context.profile, Path(context.profile.trace_file), context.max_model_len
        window = TraceWindow(profile.trace_start_s, profile.time_scale, profile.duration_s, profile.num_requests)
        rows = read_trace_rows(path)
        chosen = []
        for row in select_rows(rows, window, str(path)):
            prompt_ids = None
            if row.prompt_text is not None:
                if context.maker.tokenizer is None:
                    raise ConfigError(f"{path}:{row.line}: a text prompt needs a model with a tokenizer")
                prompt_ids = context.maker.tokenizer.encode(row.prompt_text)
                if not prompt_ids:
                    raise ConfigError(f"{path}:{row.line}: column 'prompt': the text has no tokens")
            chosen.append((row, prompt_ids))
        clipped = sum(
            fit_to_context(len(ids or ()) or row.prompt_tokens, row.output_tokens, limit).clipped for row, ids in chosen
        )
        self.trace_summary = {
            "file": str(path),
            "rows_in_file": len(rows),
            "requests": len(chosen),
            "clipped": clipped,
            "max_model_len": limit,
        }
        return chosen

    def next_request(self, arrival_s: float | None) -> PlannedRequest:
        context = self.context
        row, prompt_ids = next(self._rows)
        fit = fit_to_context(len(prompt_ids or ()) or row.prompt_tokens, row.output_tokens, context.max_model_len)
        prompt = (
            prompt_ids[: fit.prompt_tokens] if prompt_ids else context.maker.synthetic(fit.prompt_tokens, context.rng)
        )
        return context.request(arrival_s, prompt, fit, tag=row.tag or context.profile.tag)


PROMPT_SOURCES: dict[str, type[PromptSource]] = {
    source.name: source for source in (SyntheticPrompts, SharegptPrompts, CopyingPrompts, TracePrompts, SessionPrompts)
}
