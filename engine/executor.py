"""Executors turn a `ScheduledBatch` into sampled token ids.

`ModelExecutor` is the interface the engine depends on; `TorchExecutor` runs the real model over
the paged KV cache it owns. A simulated executor (a cost model) can stand in behind the same
interface while all scheduling code stays the same.
"""

from __future__ import annotations

from typing import Protocol

import torch

from engine.batch import ScheduledBatch, ScheduledSequence
from engine.model import AttentionMetadata, CausalLM, PrefillChunk
from engine.sampler import sample
from kernels.paged_attention import length_buckets


class ModelExecutor(Protocol):
    def execute(self, batch: ScheduledBatch) -> list[int]:
        """One token id per sequence whose entry has `samples` set, in the batch's row order."""
        ...


class TorchExecutor:
    def __init__(self, model: CausalLM, num_blocks: int, block_size: int, device: torch.device, dtype: torch.dtype):
        self.model = model
        self.device = device
        config = model.config
        shape = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
        self.kv_caches = [
            (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(config.num_layers)
        ]

    @property
    def kv_cache_bytes(self) -> int:
        return sum(key.nbytes + value.nbytes for key, value in self.kv_caches)

    def execute(self, batch: ScheduledBatch) -> list[int]:
        rows = [entry for entry in batch.sequences if entry.samples]
        logits = self.compute_logits(batch)
        return sample(logits, [entry.params for entry in rows], [entry.sample_seed for entry in rows])

    @torch.inference_mode()
    def compute_logits(self, batch: ScheduledBatch) -> torch.Tensor:
        """Float32 logits [sampling rows, vocab] for the entries that sample."""
        token_ids, positions, slots, sample_rows = [], [], [], []
        for entry in batch.sequences:
            token_ids += entry.token_ids
            positions += range(entry.start_position, entry.context_len)
            slots += entry.slot_mapping
            if entry.samples:
                sample_rows.append(len(token_ids) - 1)
        metadata = self._attention_metadata(batch, slots)
        hidden = self.model(self._tensor(token_ids), self._tensor(positions), self.kv_caches, metadata)
        return self.model.compute_logits(hidden[self._tensor(sample_rows)])

    @torch.inference_mode()
    def sequence_logits(self, token_ids: list[int], block_size: int) -> torch.Tensor:
        """Float32 logits at every position of one sequence, computed in one prefill through
        the cache's first blocks (for evaluation; the engine must have no request in flight)."""
        blocks = list(range(-(-len(token_ids) // block_size)))
        entry = ScheduledSequence("score", list(token_ids), 0, blocks, list(range(len(token_ids))), True, None, 0)
        batch = ScheduledBatch(decodes=[], prefills=[entry], block_size=block_size)
        metadata = self._attention_metadata(batch, entry.slot_mapping)
        hidden = self.model(self._tensor(token_ids), self._tensor(range(len(token_ids))), self.kv_caches, metadata)
        return self.model.compute_logits(hidden)

    def _attention_metadata(self, batch: ScheduledBatch, slots: list[int]) -> AttentionMetadata:
        decodes = batch.decodes
        widest = max((len(entry.block_table) for entry in decodes), default=0)
        # Short block tables are padded with block 0; the context length masks those slots out.
        tables = [entry.block_table + [0] * (widest - len(entry.block_table)) for entry in decodes]
        prefills, query_start = [], len(decodes)
        for entry in batch.prefills:
            prefills.append(PrefillChunk(query_start, len(entry.token_ids), entry.context_len, self._tensor(entry.block_table)))
            query_start += len(entry.token_ids)
        context_lens = [entry.context_len for entry in decodes]
        return AttentionMetadata(
            slot_mapping=self._tensor(slots),
            num_decode_tokens=len(decodes),
            decode_block_tables=self._tensor(tables),
            decode_context_lens=self._tensor(context_lens),
            decode_buckets=length_buckets(context_lens, batch.block_size, self.device) if decodes else [],
            prefills=prefills,
        )

    def _tensor(self, values) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)
