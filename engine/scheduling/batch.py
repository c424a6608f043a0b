"""`ScheduledBatch`: what the scheduler hands an executor for one step, in plain Python data.

This is the seam between scheduling and execution: an executor (the real torch model or a
simulated cost model) turns it into sampled token ids without knowing how it was chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.requests.sampling_params import SamplingParams


@dataclass
class ScheduledSequence:
    request_id: str
    token_ids: list[int]  # the tokens computed this step
    start_position: int  # position of token_ids[0] (= tokens already in the cache)
    block_tables: list[list[int]]  # one per KV group (engine/model_spec/kv_layout.py)
    slot_mappings: list[list[int]]  # per KV group, the cache slot of each token in token_ids
    samples: bool  # True when this chunk reaches the end of the known tokens: sample one more
    params: SamplingParams
    # Seed for the token sampled this step: the request's seed mixed with the output index, so a
    # request's tokens do not depend on batch mates or on being preempted and recomputed.
    sample_seed: int
    # Speculative decoding (engine/scheduling/speculation.py): the last num_proposed of token_ids
    # are proposals, computed with the last sampled token, one decode row each.
    num_proposed: int = 0

    @property
    def context_len(self) -> int:
        return self.start_position + len(self.token_ids)

    @property
    def proposed(self) -> list[int]:
        return self.token_ids[len(self.token_ids) - self.num_proposed :]

    def one_row_per_token(self) -> list[ScheduledSequence]:
        """A speculating decode as one-token decodes, each attending up to its own position (the
        rows before it write their K/V first, in the same step) and sampling."""
        return [
            ScheduledSequence(
                self.request_id,
                [token],
                self.start_position + index,
                self.block_tables,
                [group_slots[index : index + 1] for group_slots in self.slot_mappings],
                True,
                self.params,
                self.sample_seed,
            )
            for index, token in enumerate(self.token_ids)
        ]


def slot_mappings(block_tables: list[list[int]], start: int, count: int, block_size: int) -> list[list[int]]:
    """Per block table, the cache slot of positions start .. start + count - 1."""
    return [
        [table[position // block_size] * block_size + position % block_size for position in range(start, start + count)]
        for table in block_tables
    ]


@dataclass
class ScheduledBatch:
    decodes: list[ScheduledSequence]  # one token each, context already cached
    prefills: list[ScheduledSequence]  # prompt chunks (or recomputes after preemption)
    block_size: int

    @property
    def sequences(self) -> list[ScheduledSequence]:
        """Decodes first, then prefills: the row order of the flat batch and of the sampled ids."""
        return self.decodes + self.prefills

    @property
    def num_decode_tokens(self) -> int:
        """Decode rows' tokens: one each, and their proposals."""
        return sum(len(entry.token_ids) for entry in self.decodes)

    @property
    def num_proposed_tokens(self) -> int:
        return sum(entry.num_proposed for entry in self.decodes)

    def one_row_per_token(self) -> ScheduledBatch:
        """The batch with every speculating decode split into its rows (the others as they are):
        what a model computes, one sampled token per row."""
        if not self.num_proposed_tokens:
            return self
        decodes = [
            row for entry in self.decodes for row in (entry.one_row_per_token() if entry.num_proposed else [entry])
        ]
        return ScheduledBatch(decodes=decodes, prefills=self.prefills, block_size=self.block_size)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(len(chunk.token_ids) for chunk in self.prefills)

    @property
    def is_empty(self) -> bool:
        return not self.decodes and not self.prefills
