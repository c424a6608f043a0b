"""Iteration-level scheduling (continuous batching) with chunked prefill, a long-prompt queue,
prefix caching and preemption by recompute.

Each `schedule()` builds one step's batch under two budgets, `max_num_seqs` and
`max_num_batched_tokens`:
  1. running sequences: decodes first (one token each), then unfinished prefill chunks; when the
     KV cache has no block for one of them, the newest running sequence (lowest priority first
     under the "priority" policy) is preempted: its blocks are freed and it waits to be recomputed;
  2. if nothing was preempted, waiting sequences are admitted: the regular queue first, then the
     long-prompt queue, where at most `max_long_prefills` prefill at once in chunks of at most
     `long_prompt_threshold` tokens. A burst of short chats therefore never waits behind a very
     long prompt; the long one uses the budget they leave.
`update()` then records what the executor computed and sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.batch import ScheduledBatch, ScheduledSequence
from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.sequence import FinishReason, Sequence, SequenceStatus
from engine.wait_queue import WaitQueue


@dataclass
class _Budget:
    tokens: int


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager, max_model_len: int):
        self.config = config
        self.block_manager = block_manager
        self.max_model_len = max_model_len
        by_priority = config.scheduling_policy == "priority"
        self.waiting = WaitQueue(by_priority)
        self.waiting_long = WaitQueue(by_priority)
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self._in_flight: list[Sequence] = []  # row order of the last batch

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
        blocks = self.block_manager.blocks_to_cover(prompt_len + 1)
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

    def add(self, seq: Sequence) -> None:
        """Queue an admissible sequence (check `rejection_reason` first)."""
        seq.is_long = self.config.long_prompt_queue_enabled and seq.num_prompt_tokens >= self.config.long_prompt_threshold
        self._queue_of(seq).push(seq)

    def _queue_of(self, seq: Sequence) -> WaitQueue:
        return self.waiting_long if seq.is_long else self.waiting

    def has_unfinished(self) -> bool:
        return bool(self.running or self.waiting or self.waiting_long)

    # ----- one step ------------------------------------------------------------------------------

    def schedule(self, now: float) -> ScheduledBatch:
        budget = _Budget(self.config.max_num_batched_tokens)
        scheduled: list[tuple[Sequence, int]] = []
        preempted = self._schedule_running(scheduled, budget)
        if not preempted:
            self._admit_waiting(scheduled, budget, now)
        return self._build_batch(scheduled)

    def _schedule_running(self, scheduled: list[tuple[Sequence, int]], budget: _Budget) -> bool:
        decoding = [seq for seq in self.running if not seq.is_prefilling]
        prefilling = [seq for seq in self.running if seq.is_prefilling]
        preempted = False
        for seq in decoding + prefilling:
            if budget.tokens == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:  # preempted earlier in this loop
                continue
            count = self._chunk_size(seq, seq.num_uncomputed_tokens, budget)
            while not self.block_manager.can_grow(seq, count):
                victim = self._preemption_victim(scheduled, seq)
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.status is SequenceStatus.RUNNING:
                self._take(seq, count, scheduled, budget)
        return preempted

    def _preemption_victim(self, scheduled: list[tuple[Sequence, int]], needy: Sequence) -> Sequence:
        """The newest running sequence not already in this batch (lowest priority first under the
        priority policy); the needy sequence itself when there is no other."""
        in_batch = {id(seq) for seq, _ in scheduled}
        candidates = [seq for seq in self.running if id(seq) not in in_batch and seq is not needy]
        if not candidates:
            return needy
        if self.config.scheduling_policy == "priority":
            return max(candidates, key=lambda seq: (seq.priority, self.running.index(seq)))
        return candidates[-1]

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free(seq)
        self.running.remove(seq)
        seq.status = SequenceStatus.WAITING
        seq.metrics.preemptions += 1
        self.num_preemptions += 1
        self._queue_of(seq).push(seq)

    def _admit_waiting(self, scheduled: list[tuple[Sequence, int]], budget: _Budget, now: float) -> None:
        for queue in (self.waiting, self.waiting_long):
            while queue and budget.tokens > 0 and len(self.running) < self.config.max_num_seqs:
                seq = queue.peek()
                if seq.is_long and self._num_long_prefills() >= self.config.max_long_prefills:
                    break
                cached = self.block_manager.find_cached_prefix(seq)
                uncomputed = seq.num_tokens - len(cached) * self.block_manager.block_size
                count = self._chunk_size(seq, uncomputed, budget)
                if not self.config.enable_chunked_prefill and count < uncomputed <= self.config.max_num_batched_tokens:
                    break  # the whole prompt must fit in one step; wait for a step with room
                if not self._blocks_available(seq, cached, count):
                    break
                queue.pop()
                self.block_manager.admit(seq, cached)
                seq.status = SequenceStatus.RUNNING
                if seq.metrics.first_scheduled_time is None:
                    seq.metrics.first_scheduled_time = now
                self.running.append(seq)
                self._take(seq, count, scheduled, budget)

    def _blocks_available(self, seq: Sequence, cached: list[int], count: int) -> bool:
        manager = self.block_manager
        # Cached blocks that nobody holds sit in the free list; taking them shrinks it.
        cached_free = sum(1 for block_id in cached if manager.blocks[block_id].ref_count == 0)
        needed = manager.blocks_to_cover(len(cached) * manager.block_size + count) - len(cached)
        return needed <= manager.num_free_blocks - cached_free

    def _chunk_size(self, seq: Sequence, uncomputed: int, budget: _Budget) -> int:
        count = min(uncomputed, budget.tokens)
        if seq.is_long:
            count = min(count, self.config.long_prompt_threshold)
        return count

    def _num_long_prefills(self) -> int:
        return sum(1 for seq in self.running if seq.is_long and seq.is_prefilling)

    def _take(self, seq: Sequence, count: int, scheduled: list[tuple[Sequence, int]], budget: _Budget) -> None:
        self.block_manager.grow(seq, count)
        scheduled.append((seq, count))
        budget.tokens -= count

    def _build_batch(self, scheduled: list[tuple[Sequence, int]]) -> ScheduledBatch:
        batch = ScheduledBatch(decodes=[], prefills=[], block_size=self.block_manager.block_size)
        decode_seqs, prefill_seqs = [], []
        for seq, count in scheduled:
            start = seq.num_computed_tokens
            entry = ScheduledSequence(
                request_id=seq.request_id,
                token_ids=seq.token_ids[start : start + count],
                start_position=start,
                block_table=list(seq.block_table),
                slot_mapping=[self.block_manager.slot(seq, position) for position in range(start, start + count)],
                samples=start + count == seq.num_tokens,
                params=seq.params,
                sample_seed=hash((seq.seed, seq.num_output_tokens)) & 0x7FFF_FFFF_FFFF_FFFF,
            )
            if count == 1:
                batch.decodes.append(entry)
                decode_seqs.append(seq)
            else:
                batch.prefills.append(entry)
                prefill_seqs.append(seq)
        self._in_flight = decode_seqs + prefill_seqs
        return batch

    def update(self, batch: ScheduledBatch, sampled_token_ids: list[int], now: float) -> list[Sequence]:
        """Record a computed batch; returns the sequences that received a new token."""
        sampled = iter(sampled_token_ids)
        extended = []
        for seq, entry in zip(self._in_flight, batch.sequences):
            seq.num_computed_tokens += len(entry.token_ids)
            self.block_manager.register_full_blocks(seq)
            if entry.samples:
                seq.append_token(next(sampled), now)
                extended.append(seq)
        self._in_flight = []
        return extended

    # ----- leaving ------------------------------------------------------------------------------

    def finish(self, seq: Sequence, reason: FinishReason, now: float) -> None:
        """End a sequence (stop, length or abort) and release everything it holds."""
        if seq.status is SequenceStatus.RUNNING:
            self.block_manager.free(seq)
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self._queue_of(seq).remove(seq)
        seq.mark_finished(reason, now)
