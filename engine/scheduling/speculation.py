"""Speculative decoding: proposing tokens before the model computes them, and keeping those it
agrees with.

A speculating decode row computes its last sampled token and k proposed ones in one step, as
k + 1 decode rows of the batch (`ScheduledBatch.one_row_per_token`): row i attends to the cache
up to its own position and its greedy token is what plain decoding would sample after the
proposals before it. The proposals up to the first disagreement are kept, plus the model's own
token at that point, so a step emits 1 to k + 1 tokens and the output is exactly plain greedy
decoding's (tests/engine/scheduling/test_speculation.py holds that on both bundled models).

Proposers:
- `NgramProposer` (vLLM's "ngram", prompt lookup): find the sequence's last n tokens earlier in
  the sequence, for n from prompt_lookup_max down to prompt_lookup_min, and propose what followed
  that occurrence (the latest one). No second model; it pays where outputs copy their prompt
  (code edits, summaries, extraction) and proposes nothing elsewhere.
- `DraftProposer` (simulated GPUs): a draft model stands in, as many placeholder tokens as asked;
  the simulated executor accepts each with `draft_acceptance_rate` and charges its draft steps.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.configuration.config import EngineConfig


class NgramProposer:
    def __init__(self, min_n: int, max_n: int):
        self.min_n, self.max_n = min_n, max_n

    def propose(self, token_ids: list[int], limit: int) -> list[int]:
        """Up to `limit` tokens that followed the latest earlier occurrence of the longest run of
        last tokens found (empty if none)."""
        if limit <= 0 or len(token_ids) < self.min_n + 1:
            return []
        tokens = np.asarray(token_ids, dtype=np.int64)
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            # Every earlier run of n tokens that at least one token follows (the last token is left
            # out, so the suffix itself is not among them).
            earlier = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)
            matches = np.flatnonzero((earlier == tokens[-n:]).all(axis=1))
            if matches.size:
                follow = int(matches[-1]) + n
                return tokens[follow : follow + limit].tolist()
        return []


class DraftProposer:
    """A simulated draft model: it always proposes the most it may; what it is worth is decided
    by the simulated executor (engine/simulation/executor.py)."""

    PLACEHOLDER_TOKEN = 0

    def propose(self, token_ids: list[int], limit: int) -> list[int]:
        return [self.PLACEHOLDER_TOKEN] * max(limit, 0)


# Each proposing method's proposer, by its name in engine/configuration/speculation_methods.py.
PROPOSERS: dict[str, Callable[[EngineConfig], NgramProposer | DraftProposer]] = {
    "ngram": lambda config: NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max),
    "draft": lambda config: DraftProposer(),
}


def proposer_for(config: EngineConfig) -> NgramProposer | DraftProposer | None:
    """The proposer of the configuration's method; None for a method that does not propose."""
    make = PROPOSERS.get(config.speculative_method) if config.speculates else None
    return make(config) if make is not None else None


def next_proposal_limit(limit: int, all_accepted: bool, most: int) -> int:
    """The heuristic schedule (transformers' assisted generation, `num_assistant_tokens_schedule =
    "heuristic"`): 2 more proposals after a step that accepted all it proposed, 1 fewer after one
    that rejected some, between 1 and `most`. Where acceptance falls off along a proposal (SmolLM2
    copying text: 0.67 of first proposals, 0.41 over four) it settles at the length whose last
    proposal is still worth its row."""
    return min(most, limit + 2) if all_accepted else max(1, limit - 1)


def accepted_length(proposed: list[int], targets: list[int]) -> int:
    """How many proposals the model agreed with, in order: targets[i] is the model's token after
    the sequence and proposed[:i]."""
    accepted = 0
    for draft, target in zip(proposed, targets):
        if draft != target:
            break
        accepted += 1
    return accepted
