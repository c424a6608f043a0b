"""Conversations that come back: traffic of multi-turn sessions (`prompts = "sessions"`).

A session starts when the traffic's arrival process says so. Each next turn arrives a think time
after the previous turn's last token (exponential, mean `think_time_s`), with the whole
conversation so far as its prompt: every earlier question and answer, then the new question. So
the previous turn's prompt is a prefix of the next one, and prefix caching has something to find.

With a tokenizer, the turns are a ShareGPT conversation's exchanges (the chat template applied
when the model has one; the messages go to a server's chat endpoint), and the answers in later
prompts are the conversation's own reference answers, not what the model generated: every
configuration then receives the same prompts, so runs compare. Each turn's output length is its
reference answer's, within `output_len`'s low and high. Without a tokenizer (a simulated GPU),
the turns are synthetic: the new question's length drawn from `prompt_len`, the answer's from
`output_len`, and the answer's tokens in the next prompt are as many synthetic tokens.

A session ends after `turns` turns, when its conversation has no more exchanges, when a turn did
not finish (rejected, aborted, failed), or when the next prompt would not fit the context (those
are counted: `cut_by_context`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.loading.sharegpt import load_sharegpt
from workbench.backends.protocol import Chat
from workbench.traffic.context_fit import fit_to_context, prompt_room
from workbench.traffic.prompts import PromptMaker


@dataclass
class _Session:
    rng: np.random.Generator  # its own: its turns and think times do not depend on when others end
    exchanges: tuple[tuple[str, str], ...] | None  # ShareGPT's (question, answer) pairs; None: synthetic
    turns: int  # how many turns it will have at most
    sent: int = 0  # turns sent so far
    prompt: list[int] = field(default_factory=list)  # synthetic: the last prompt's tokens
    last_output: int = 0  # synthetic: the last turn's output length


@dataclass(frozen=True)
class Turn:
    session: int
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    messages: Chat | None
    clipped: bool  # fit_to_context cut its prompt or output


class Sessions:
    def __init__(self, profile, maker: PromptMaker, rng: np.random.Generator, max_model_len: int):
        """`rng` is the parent of every session's own generator (one spawned per session, in the
        order sessions start): the same seed gives each session the same turns whatever the
        timing of the others' ends."""
        self.profile, self._maker, self._rng, self._limit = profile, maker, rng, max_model_len
        self._sessions: list[_Session] = []
        self.cut_by_context = 0  # sessions ended because their next prompt would not fit
        if maker.tokenizer is not None:
            self._conversations = load_sharegpt().conversations

    @property
    def started(self) -> int:
        return len(self._sessions)

    def start(self) -> Turn:
        """A new session's first turn."""
        (rng,) = self._rng.spawn(1)
        if self._maker.tokenizer is not None:
            conversation = self._conversations[int(rng.integers(0, len(self._conversations)))]
            session = _Session(rng, conversation.exchanges, min(self.profile.turns, len(conversation.exchanges)))
        else:
            session = _Session(rng, None, self.profile.turns)
        self._sessions.append(session)
        return self._turn(len(self._sessions) - 1)  # a first turn too long for the context is cut to fit

    def think_time(self, session: int) -> float:
        mean = self.profile.think_time_s
        return float(self._sessions[session].rng.exponential(mean)) if mean > 0 else 0.0

    def next_turn(self, session: int) -> Turn | None:
        """The session's next turn, or None once it is over."""
        state = self._sessions[session]
        if state.sent >= state.turns:
            return None
        turn = self._turn(session)
        if turn is None:
            self.cut_by_context += 1
        return turn

    def _turn(self, session: int) -> Turn | None:
        """The session's next turn; None when its prompt would not fit the context (a first turn's
        is cut to fit instead, as ShareGPT prompts are)."""
        state, room = self._sessions[session], prompt_room(self._limit)
        if state.exchanges is not None:
            prompt, messages, reply = self._sharegpt_prompt(state.exchanges[: state.sent + 1])
        else:
            question = min(self.profile.prompt_len.sample(state.rng, room), room)
            answer = self._maker.synthetic(state.last_output, state.rng) if state.sent else []
            prompt, messages = state.prompt + answer + self._maker.synthetic(question, state.rng), None
        if len(prompt) > room and state.sent:
            return None
        if state.exchanges is not None:  # the reference answer's length, within output_len's low and high
            wanted = min(max(reply, self.profile.output_len.low), self.profile.output_len.high or reply)
        else:
            wanted = self.profile.output_len.sample(state.rng, self._limit - min(len(prompt), room) - 1)
        fit = fit_to_context(len(prompt), wanted, self._limit)
        if fit.prompt_tokens < len(prompt):  # a first turn cut to fit: the chat no longer says what it holds
            prompt, messages = prompt[: fit.prompt_tokens], None
        if state.exchanges is None:
            state.prompt, state.last_output = prompt, fit.max_tokens
        state.sent += 1
        return Turn(session, tuple(prompt), fit.max_tokens, messages, fit.clipped)

    def _sharegpt_prompt(self, exchanges: tuple[tuple[str, str], ...]) -> tuple[list[int], Chat | None, int]:
        """The prompt of the turn asking exchanges[-1]'s question after the earlier exchanges, the
        chat it was templated from, and the length of its reference answer in tokens."""
        tokenizer = self._maker.tokenizer
        messages: list[dict] = []
        for question, answer in exchanges[:-1]:
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": exchanges[-1][0]})
        if tokenizer.chat_template:
            prompt, chat = tokenizer.encode(tokenizer.apply_chat_template(messages)), tuple(messages)
        else:
            prompt, chat = tokenizer.encode("\n\n".join(message["content"] for message in messages)), None
        reply = len(tokenizer.encode(exchanges[-1][1], add_special_tokens=False))
        return prompt, chat, reply
