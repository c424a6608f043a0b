"""Iteration-level scheduling (continuous batching) with chunked prefill, a long-prompt queue,
prefix caching and preemption by recompute.

Each `schedule()` builds one step's batch under two budgets, `max_num_seqs` and
`max_num_batched_tokens`:
  1. running sequences: decodes first (one token each), then unfinished prefill chunks. When the
     KV cache has no block for one of them, a running sequence is preempted, as in vLLM V1: the
     lowest-priority one (under the "priority" policy), then the latest to arrive, which may be
     the sequence that asked. Its blocks are freed and it waits to be recomputed;
  2. if nothing was preempted, waiting sequences are admitted: the regular queue first, then the
     long-prompt queue, where at most `max_long_prefills` prefill at once in chunks of at most
     `long_prompt_threshold` tokens. A burst of short chats therefore never waits behind a very
     long prompt; the long one uses the budget they leave. Two rules keep that fair: a long prompt
     that has waited `long_prompt_max_wait_s` goes first (nobody is admitted ahead of it), and
     under the "priority" policy the queues are served by priority across both, a waiting
     request preempting running ones of lower priority when it has no slot or no blocks.
With speculative decoding on, each decode also computes the tokens its proposer offers
(engine/scheduling/speculation.py), as far as the token budget and free KV blocks allow: a
proposal never preempts anyone. `update()` keeps the ones the model agreed with and gives back
the blocks the rejected ones took.
With `num_scheduler_steps` N > 1 (vLLM 0.6's multi-step scheduling), step 2 happens only every N
decode steps, or when nothing runs; a step that prefills ends such a run of N.
`update()` then records what the executor computed and sampled.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from engine.configuration.config import EngineConfig
from engine.model_spec.kv_layout import blocks_held
from engine.requests.sequence import FinishReason, Sequence, SequenceStatus, StopCause
from engine.requests.step_trace import (
    WAITING,
    WAITING_LONG,
    Held,
    NoTrace,
    ScheduledRow,
    TraceBuilder,
)
from engine.scheduling.batch import ScheduledBatch, ScheduledSequence, slot_mappings
from engine.scheduling.block_manager import BlockManager
from engine.scheduling.speculation import accepted_length, next_proposal_limit, proposer_for
from engine.scheduling.wait_queue import WaitQueue


@dataclass
class _Budget:
    tokens: int


class _Admission(enum.Enum):
    ADMITTED = "admitted"
    NO_SLOT = "max_num_seqs reached"
    NO_BLOCKS = "not enough free KV blocks"
    NO_BUDGET = "the whole prompt does not fit this step's token budget (chunked prefill is off)"


class Scheduler:
    def __init__(
        self,
        config: EngineConfig,
        block_manager: BlockManager,
        max_model_len: int,
        eos_token_ids: frozenset[int] = frozenset(),
    ):
        self.config = config
        self.block_manager = block_manager
        self.max_model_len = max_model_len
        self.eos_token_ids = eos_token_ids  # the model's and its tokenizer's: a sequence stops on one
        self.by_priority = config.scheduling_policy == "priority"
        self.waiting = WaitQueue(self.by_priority)
        self.waiting_long = WaitQueue(self.by_priority)
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self._in_flight: list[Sequence] = []  # row order of the last batch
        self.proposer = proposer_for(config)  # None: no speculative decoding
        self._proposals: dict[Sequence, list[int]] = {}  # this step's, by speculating sequence
        # Since the engine started (vLLM's spec_decode counters): decode rows that speculated,
        # tokens they proposed, and of those the tokens the model agreed with.
        self.num_drafts = self.num_draft_tokens = self.num_accepted_tokens = 0
        self._steps_into_run = 0  # multi-step scheduling: steps since the last admission (0: admit now)
        # Each step's causal record (engine/requests/step_trace.py), or a NoTrace that drops every record.
        self.trace = TraceBuilder(block_manager.is_windowed) if config.step_trace else NoTrace()

    # ----- arrival -------------------------------------------------------------------------------

    def rejection_reason(self, seq: Sequence) -> str | None:
        """Why this request can never run, or None if it can."""
        prompt_len = seq.num_prompt_tokens
        if prompt_len == 0:
            return "the prompt is empty"
        if prompt_len >= self.max_model_len:
            return (
                f"the prompt has {prompt_len} tokens; the context (max_model_len) is {self.max_model_len} tokens, "
                "leaving no room for output"
            )
        blocks = self.blocks_held(prompt_len + 1)
        if blocks > self.block_manager.num_blocks:
            return (
                f"the prompt needs {blocks} KV blocks of {self.block_manager.block_size} tokens; "
                f"the whole cache has {self.block_manager.num_blocks}"
            )
        if not self.config.enable_chunked_prefill and prompt_len > self.config.max_num_batched_tokens:
            return (
                f"the prompt has {prompt_len} tokens, more than max_num_batched_tokens "
                f"({self.config.max_num_batched_tokens}), and chunked prefill is off"
            )
        return None

    def blocks_held(self, num_tokens: int) -> int:
        """The most blocks one sequence of num_tokens tokens can need at once (a step's chunk is at
        most the token budget)."""
        manager = self.block_manager
        return blocks_held(manager.windows, num_tokens, manager.block_size, self.config.max_num_batched_tokens)

    def add(self, seq: Sequence) -> None:
        """Queue an admissible sequence (check `rejection_reason` first)."""
        seq.is_long = (
            self.config.long_prompt_queue_enabled and seq.num_prompt_tokens >= self.config.long_prompt_threshold
        )
        self._queue_of(seq).push(seq)

    def _queue_of(self, seq: Sequence) -> WaitQueue:
        return self.waiting_long if seq.is_long else self.waiting

    # ----- one step ------------------------------------------------------------------------------

    def schedule(self, now: float) -> ScheduledBatch:
        budget = _Budget(self.config.max_num_batched_tokens)
        scheduled: dict[Sequence, int] = {}  # sequence -> tokens it computes this step, in order
        preempted = self._schedule_running(scheduled, budget)
        if preempted:
            self.trace.held_back(
                lambda: self._held({}, budget, "a running request was preempted in this step: nobody is admitted")
            )
        elif self._steps_into_run and self.running:
            steps = self.config.num_scheduler_steps
            to_go = steps - self._steps_into_run  # now: the trace reads it after the count moves on
            self.trace.held_back(
                lambda: self._held({}, budget, f"multi-step scheduling admits every {steps} steps: {to_go} to go")
            )
        else:
            self._admit_waiting(scheduled, budget, now)
        batch = self._build_batch(scheduled)
        # Multi-step scheduling (vLLM 0.6's --num-scheduler-steps N): a run of N decode steps
        # starts at an admission; a step that prefills runs alone and ends the run.
        if batch.prefills:
            self._steps_into_run = 0
        else:
            self._steps_into_run = (self._steps_into_run + 1) % self.config.num_scheduler_steps
        return batch

    def _schedule_running(self, scheduled: dict[Sequence, int], budget: _Budget) -> bool:
        preempted = False
        decodes_first = sorted(self.running, key=lambda seq: seq.is_prefilling)  # stable: keeps running order
        for seq in decodes_first:
            if budget.tokens == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:  # preempted earlier in this loop
                continue
            count = self._chunk_size(seq, seq.num_uncomputed_tokens, budget)
            if self.proposer is not None and not seq.is_prefilling and seq.num_output_tokens:  # a decode
                proposals = self._proposals_that_fit(seq, budget)
                if proposals:
                    self._proposals[seq] = proposals
                    count += len(proposals)
            while not self.block_manager.can_grow(seq, count):
                victim = self._preemption_victim()
                why = self.trace.describe(lambda: self._no_block_reason(seq, count, victim))  # before the free
                self._preempt(victim, scheduled, budget, why)
                preempted = True
                if victim is seq:
                    break
            if seq.status is SequenceStatus.RUNNING:
                self._take(seq, count, scheduled, budget)
        return preempted

    def _proposals_that_fit(self, seq: Sequence, budget: _Budget) -> list[int]:
        """The proposer's tokens for a decoding sequence, as many as the token budget, its
        max_tokens and context leave room to emit, and only if free blocks hold them all."""
        limit = min(
            seq.proposal_limit or self.config.num_speculative_tokens,
            budget.tokens - 1,
            seq.params.max_tokens - seq.num_output_tokens - 1,
            self.max_model_len - seq.num_tokens - 1,
        )
        proposals = self.proposer.propose(seq.token_ids, limit)
        return proposals if self.block_manager.can_grow(seq, 1 + len(proposals)) else []

    def _preemption_order(self, seq: Sequence) -> tuple[int, int]:
        """Larger goes first: lower priority (a larger value) under the priority policy, then later arrival."""
        return (seq.priority if self.by_priority else 0, seq.arrival_index)

    def _preemption_victim(self) -> Sequence:
        return max(self.running, key=self._preemption_order)

    def _no_block_reason(self, seq: Sequence, count: int, victim: Sequence) -> str:
        manager = self.block_manager
        rule = (
            f"the lowest priority ({victim.priority}), then the latest arrival"
            if self.by_priority
            else "the latest arrival"
        )
        return (
            f"no free KV block for request {seq.request_id} (needs {manager.new_blocks_needed(seq, count)}, "
            f"{manager.num_free_blocks} free); victim {'itself' if victim is seq else victim.request_id}: {rule}"
        )

    def _preempt(self, seq: Sequence, scheduled: dict[Sequence, int], budget: _Budget, reason: str) -> None:
        """Free the sequence's blocks and send it back to its queue; if it was already part of this
        step's batch, it leaves the batch and its tokens return to the budget. `reason` says why,
        for the trace."""
        budget.tokens += scheduled.pop(seq, 0)
        self._proposals.pop(seq, None)
        released, freed = self.block_manager.free(seq)
        self.trace.preempted(seq.request_id, released, freed, reason)
        self.running.remove(seq)
        seq.status = SequenceStatus.WAITING
        seq.metrics.preemptions += 1
        self.num_preemptions += 1
        self._queue_of(seq).push(seq)

    def _admit_waiting(self, scheduled: dict[Sequence, int], budget: _Budget, now: float) -> None:
        skipped: dict[WaitQueue, str] = {}  # queues whose head cannot start this step, and why
        admitted: list[Sequence] = []  # never preempted in the step that admitted them: no cycles
        overdue = None
        while budget.tokens > 0:
            queue = self._next_queue(skipped, now)
            if queue is None:
                break
            seq = queue.peek()
            outcome = self._try_admit(seq, scheduled, budget, now)
            if outcome is _Admission.ADMITTED:
                admitted.append(seq)
                continue
            if outcome is not _Admission.NO_BUDGET and self._preempt_for(
                seq, outcome, admitted, scheduled, budget, now
            ):
                continue
            skipped[queue] = self._admission_detail(outcome)
            if self._is_overdue(seq, now):
                overdue = f"the overdue long prompt {seq.request_id} goes first"
                break  # the long queue's guarantee: nobody is admitted ahead of it
        self.trace.held_back(lambda: self._held(skipped, budget, overdue))

    def _admission_detail(self, outcome: _Admission) -> str:
        if outcome is _Admission.NO_SLOT:
            return f"max_num_seqs ({self.config.max_num_seqs}) reached"
        if outcome is _Admission.NO_BLOCKS:
            return f"{outcome.value} ({self.block_manager.num_free_blocks} free)"
        return outcome.value

    def _held(self, skipped: dict[WaitQueue, str], budget: _Budget, otherwise: str | None) -> list[Held]:
        """The trace's reason why each waiting queue's head was not admitted in this step."""
        held = []
        for queue, name in ((self.waiting, WAITING), (self.waiting_long, WAITING_LONG)):
            if not queue:
                continue
            reason = skipped.get(queue) or otherwise
            if reason is None and budget.tokens == 0:
                reason = f"the step's token budget ({self.config.max_num_batched_tokens} tokens) is used"
            if reason is None:  # _next_queue left it out
                reason = f"max_long_prefills ({self.config.max_long_prefills}) long prompts already prefill"
            held.append(Held(queue.peek().request_id, name, reason))
        return held

    def _next_queue(self, skipped: dict[WaitQueue, str], now: float) -> WaitQueue | None:
        """The queue whose head is admitted next: an overdue long prompt, else by priority across
        both queues under the priority policy, the regular queue before the long one otherwise."""
        candidates = [queue for queue in (self.waiting, self.waiting_long) if queue and queue not in skipped]
        if self.waiting_long in candidates and self._num_long_prefills() >= self.config.max_long_prefills:
            candidates.remove(self.waiting_long)
        if not candidates:
            return None

        def order(queue: WaitQueue) -> tuple:
            head = queue.peek()
            overdue = self._is_overdue(head, now)
            return (not overdue, head.priority if self.by_priority else 0, head.is_long, head.arrival_index)

        return min(candidates, key=order)

    def _is_overdue(self, seq: Sequence, now: float) -> bool:
        limit = self.config.long_prompt_max_wait_s
        return seq.is_long and limit > 0 and now - seq.metrics.arrival_time >= limit

    def _try_admit(self, seq: Sequence, scheduled: dict[Sequence, int], budget: _Budget, now: float) -> _Admission:
        if len(self.running) >= self.config.max_num_seqs:
            return _Admission.NO_SLOT
        hit = self.block_manager.find_cached_prefix(seq)
        uncomputed = seq.num_tokens - hit.num_blocks * self.block_manager.block_size
        count = self._chunk_size(seq, uncomputed, budget)
        if not self.config.enable_chunked_prefill and count < uncomputed <= self.config.max_num_batched_tokens:
            # The whole prompt must fit in one step. (Only a recompute after preemption can be
            # longer than the budget; that one is chunked, or it could never run again.)
            return _Admission.NO_BUDGET
        if not self.block_manager.can_admit(hit, count):
            return _Admission.NO_BLOCKS
        self._queue_of(seq).pop()
        from_free = self.block_manager.admit(seq, hit)
        self.trace.admitted(seq.request_id, WAITING_LONG if seq.is_long else WAITING, hit.block_ids(), from_free)
        seq.status = SequenceStatus.RUNNING
        if seq.metrics.first_scheduled_time is None:
            seq.metrics.first_scheduled_time = now
        self.running.append(seq)
        self._take(seq, count, scheduled, budget)
        return _Admission.ADMITTED

    def _preempt_for(
        self,
        seq: Sequence,
        outcome: _Admission,
        admitted: list[Sequence],
        scheduled: dict[Sequence, int],
        budget: _Budget,
        now: float,
    ) -> bool:
        """Under the priority policy, make room for a waiting sequence by preempting the running
        sequence that would be preempted first, if its priority is strictly lower. Exempt: those
        admitted in this step, and overdue long prompts (the long queue's guarantee would admit
        them straight back, round after round)."""
        candidates = [
            running for running in self.running if running not in admitted and not self._is_overdue(running, now)
        ]
        if not self.by_priority or not candidates:
            return False
        victim = max(candidates, key=self._preemption_order)
        if victim.priority <= seq.priority:
            return False
        reason = (
            f"request {seq.request_id} (priority {seq.priority}) waits: {outcome.value}; victim {victim.request_id}: "
            f"a lower priority ({victim.priority})"
        )
        self._preempt(victim, scheduled, budget, reason)
        return True

    def _chunk_size(self, seq: Sequence, uncomputed: int, budget: _Budget) -> int:
        count = min(uncomputed, budget.tokens)
        if seq.is_long and self.config.enable_chunked_prefill:
            count = min(count, self.config.long_prompt_threshold)
        return count

    def _num_long_prefills(self) -> int:
        return sum(1 for seq in self.running if seq.is_long and seq.is_prefilling)

    def _take(self, seq: Sequence, count: int, scheduled: dict[Sequence, int], budget: _Budget) -> None:
        self.trace.allocated(seq.request_id, self.block_manager.grow(seq, count))
        scheduled[seq] = count
        budget.tokens -= count

    def _build_batch(self, scheduled: dict[Sequence, int]) -> ScheduledBatch:
        batch = ScheduledBatch(decodes=[], prefills=[], block_size=self.block_manager.block_size)
        decode_seqs, prefill_seqs = [], []
        proposals, self._proposals = self._proposals, {}
        for seq, count in scheduled.items():
            start = seq.num_computed_tokens
            proposed = proposals.get(seq, [])
            known = count - len(proposed)  # tokens the sequence already has
            entry = ScheduledSequence(
                request_id=seq.request_id,
                token_ids=seq.token_ids[start : start + known] + proposed,
                start_position=start,
                block_tables=[list(table) for table in seq.block_tables],
                slot_mappings=slot_mappings(seq.block_tables, start, count, self.block_manager.block_size),
                samples=start + known == seq.num_tokens,
                params=seq.params,
                sample_seed=hash((seq.seed, seq.num_output_tokens)) & 0x7FFF_FFFF_FFFF_FFFF,
                num_proposed=len(proposed),
            )
            # A decode extends an output: its one token is the last one sampled (with the
            # proposals after it, if it speculates). A one-token chunk of a prompt (or of a
            # recompute) is prefill, and need not sample.
            if known == 1 and entry.samples and seq.num_output_tokens > 0:
                batch.decodes.append(entry)
                decode_seqs.append(seq)
            else:
                batch.prefills.append(entry)
                prefill_seqs.append(seq)
        self._in_flight = decode_seqs + prefill_seqs
        self.trace.scheduled(
            lambda admitted_from: [
                self._trace_row(seq, entry, kind, admitted_from)
                for seqs, entries, kind in (
                    (decode_seqs, batch.decodes, "decode"),
                    (prefill_seqs, batch.prefills, "prefill"),
                )
                for seq, entry in zip(seqs, entries)
            ]
        )
        return batch

    def _trace_row(
        self, seq: Sequence, entry: ScheduledSequence, kind: str, admitted_from: dict[str, str]
    ) -> ScheduledRow:
        return ScheduledRow(
            seq.request_id,
            kind,
            entry.start_position,
            entry.context_len,
            seq.num_prompt_tokens,
            admitted_from.get(seq.request_id),
            kind == "prefill" and seq.num_output_tokens > 0,
        )

    def update(
        self, batch: ScheduledBatch, sampled_token_ids: list[int], now: float
    ) -> list[tuple[Sequence, list[int]]]:
        """Record a computed batch (`sampled_token_ids`: one per row of
        `batch.one_row_per_token()` that samples), keep the proposals the model agreed with, and
        stop the sequences that are done (vLLM's check_stop, here too, token by token); returns
        each sequence that received tokens, finished or not, with those tokens."""
        sampled = iter(sampled_token_ids)
        extended = []
        for seq, entry in zip(self._in_flight, batch.sequences):
            new_tokens = [next(sampled) for _ in range(1 + entry.num_proposed)] if entry.samples else []
            accepted = accepted_length(entry.proposed, new_tokens)
            del new_tokens[accepted + 1 :]  # the agreed proposals, then the model's own next token
            seq.num_computed_tokens += len(entry.token_ids) - entry.num_proposed + accepted
            for token in new_tokens:
                seq.append_token(token, now)
            registered = self.block_manager.register_full_blocks(seq)
            released, freed = self.block_manager.slide_window(seq)
            self.trace.registered_blocks(registered)
            self.trace.released(seq.request_id, released, freed, "left the sliding window")
            if entry.num_proposed:
                seq.metrics.record_speculation(entry.num_proposed, accepted)
                self.num_drafts += 1
                self.num_draft_tokens += entry.num_proposed
                self.num_accepted_tokens += accepted
                self.trace.speculated(seq.request_id, entry.proposed, accepted)
                if self.config.num_speculative_tokens_schedule == "heuristic":
                    seq.proposal_limit = next_proposal_limit(
                        seq.proposal_limit or self.config.num_speculative_tokens,
                        accepted == entry.num_proposed,
                        self.config.num_speculative_tokens,
                    )
                released, freed = self.block_manager.release_tail(seq)
                self.trace.released(seq.request_id, released, freed, "held rejected proposals")
            if new_tokens:
                extended.append((seq, new_tokens))
        self._in_flight = []
        # After every row's blocks are settled, in row order; a stop drops the tokens after it.
        return [(seq, self._check_stops(seq, len(new_tokens), now)) for seq, new_tokens in extended]

    def _check_stops(self, seq: Sequence, num_new: int, now: float) -> list[int]:
        """Stop the sequence at the first of its `num_new` last tokens that ends it, dropping
        those after; returns the new tokens it keeps."""
        first = seq.num_tokens - num_new
        for length in range(first + 1, seq.num_tokens + 1):
            token = seq.token_ids[length - 1]
            matched_stop = seq.detokenizer.add(token) if seq.detokenizer is not None else None
            stop = self._stop_reason(seq, token, length, matched_stop)
            if stop is not None:
                seq.keep_tokens(length)
                reason, cause, detail = stop
                self.finish(seq, reason, detail, now, cause)
                break
        return seq.token_ids[first:]

    def _stop_reason(
        self, seq: Sequence, token: int, length: int, matched_stop: str | None
    ) -> tuple[FinishReason, StopCause, str] | None:
        """Why a sequence stops at `token`, which made it `length` tokens long: the reason, its
        typed cause and the detail its metrics keep."""
        params = seq.params
        num_output_tokens = length - seq.num_prompt_tokens
        if token in self.eos_token_ids and not params.ignore_eos:
            return FinishReason.STOP, StopCause.END_OF_SEQUENCE, "end-of-sequence token"
        if token in params.stop_token_ids:
            return FinishReason.STOP, StopCause.STOP_TOKEN, f"stop token {token}"
        if matched_stop is not None:
            return FinishReason.STOP, StopCause.STOP_STRING, f"stop string {matched_stop!r}"
        if num_output_tokens >= params.max_tokens:
            return FinishReason.LENGTH, StopCause.MAX_TOKENS, f"max_tokens ({params.max_tokens})"
        if length >= self.max_model_len:
            return FinishReason.LENGTH, StopCause.CONTEXT_FULL, f"context full (max_model_len {self.max_model_len})"
        if self.blocks_held(length + 1) > self.block_manager.num_blocks:
            return (
                FinishReason.LENGTH,
                StopCause.KV_CACHE_FULL,
                (
                    f"the whole KV cache ({self.block_manager.num_blocks} blocks of {self.config.block_size} tokens) "
                    "holds no more of it"
                ),
            )
        return None

    # ----- leaving ------------------------------------------------------------------------------

    def finish(
        self, seq: Sequence, reason: FinishReason, detail: str, now: float, stop_cause: StopCause | None = None
    ) -> None:
        """End a sequence (stop, length or abort) and release everything it holds; `detail` says
        what ended it, for its metrics, and `stop_cause` what stopped it, typed."""
        if seq.status is SequenceStatus.RUNNING:
            released, freed = self.block_manager.free(seq)
            self.running.remove(seq)
            cause = "aborted" if reason is FinishReason.ABORT else f"finished ({reason.value})"
            self.trace.released(seq.request_id, released, freed, cause)
        elif seq.status is SequenceStatus.WAITING:
            self._queue_of(seq).remove(seq)
        seq.mark_finished(reason, now, detail, stop_cause)
