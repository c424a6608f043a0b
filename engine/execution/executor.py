"""Executors turn a `ScheduledBatch` into sampled token ids.

`ModelExecutor` is the interface the engine depends on; `TorchExecutor` runs the real model over
the paged KV cache it owns; `SimulatedExecutor` (engine/simulation/executor.py) stands in with a
cost model behind the same interface while all scheduling code stays the same.
"""

from __future__ import annotations

from typing import Protocol

import torch

from engine.execution.background_compile import BackgroundCompile
from engine.execution.compile_cache import (
    CompileClock,
    CompiledPart,
    CompileProgress,
    graph_key,
    with_own_code,
)
from engine.execution.compiled_prefill import CompiledHalves
from engine.execution.model import AttentionMetadata, CausalLM, LayerHalves, PrefillChunk
from engine.execution.sampler import sample
from engine.model_spec.kv_layout import KvLayout
from engine.quantization import BATCHED_ROWS, has_batched_copy
from engine.requests.sampling_params import SamplingParams
from engine.scheduling.batch import ScheduledBatch, ScheduledSequence, slot_mappings
from kernels.paged_attention import length_buckets
from kernels.quantized_kv import QuantizedKv, is_code_dtype, key_rotation, key_transforms, rotates_keys


class ModelExecutor(Protocol):
    """What `LLMEngine` uses of an executor, and all it uses."""

    @property
    def decode_mode(self) -> str:
        """How decode steps run, recorded with every run."""

    @property
    def prefill_mode(self) -> str:
        """How steps that prefill run, recorded with every run."""

    @property
    def last_step_compiled(self) -> bool:
        """Whether the last `execute` ran as the compiled decode graph."""

    @property
    def kv_cache_bytes(self) -> int:
        """The KV cache's size in bytes (allocated, or planned when simulated)."""

    @property
    def compile_progress(self) -> CompileProgress | None:
        """The background compile (decode graph, then prefill halves) while it runs; None otherwise."""

    def warm_up(self) -> None:
        """Pay one-time costs before the first real step."""

    def execute(self, batch: ScheduledBatch) -> list[int]:
        """One token id per row of `batch.one_row_per_token()` that samples, in row order (a
        speculating decode's proposals each have their row)."""

    def close(self) -> None:
        """Stop work still running for this executor (a background compile) and wait for it."""


class TorchExecutor:
    """Runs the model over its paged KV cache. It allocates one block more than the scheduler's
    `num_blocks`: the scratch block, which warm-up and the background compile write into while
    requests use the others, and which released sliding-window entries point to (the block
    manager's `null_block`).

    The cache is the KV layout's pool (engine/model_spec/kv_layout.py): one key and one value tensor per
    layer a block holds, each layer using the one at its place in its group."""

    def __init__(
        self,
        model: CausalLM,
        num_blocks: int,
        block_size: int,
        device: torch.device,
        dtype: torch.dtype,
        compile_decode: str = "off",
    ):
        self.model = model
        self.device = device
        self.block_size = block_size
        config = model.config
        self.scratch_block = num_blocks
        self.layout = KvLayout.of(config)
        shape = (num_blocks + 1, block_size, config.num_kv_heads, config.head_dim)
        self.kv_pool = [
            (self._cache(shape, dtype, device), self._cache(shape, dtype, device))
            for _ in range(self.layout.tensors_per_block)
        ]
        self.kv_caches = [self.kv_pool[self.layout.place(layer)[1]] for layer in range(config.num_layers)]
        if rotates_keys(dtype):
            rotation = key_rotation(config.head_dim, torch.float32, device)
            for layer in model.model.layers:
                attention = layer.self_attn
                attention.key_transform, attention.query_transform = key_transforms(rotation, attention.key_gains())
        self.compile_decode = compile_decode
        self.decode_graph = DecodeGraph(model) if compile_decode != "off" else None
        self.prefill_halves = CompiledHalves() if compile_decode != "off" else None
        self._compile_sizes = (1, 2, BATCHED_ROWS) if has_batched_copy(model) else (1, 2)
        if self.decode_graph is not None:
            self._compile_clock = CompileClock(graph_key(model, dtype, (*self._compile_sizes, "prefill halves")))
        self._background_compile: BackgroundCompile | None = None
        self.last_step_compiled = False

    @staticmethod
    def _cache(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor | QuantizedKv:
        """One K or V tensor of the pool; for an 8-bit cache, its codes and their scales."""
        if is_code_dtype(dtype):
            return QuantizedKv.zeros(shape, dtype, device)
        return torch.zeros(shape, dtype=dtype, device=device)

    @property
    def kv_cache_bytes(self) -> int:
        return sum(key.nbytes + value.nbytes for key, value in self.kv_pool)

    @property
    def decode_mode(self) -> str:
        """How decode-only steps run now: "compiled", "eager", "eager (compiling in the
        background)", or "eager (compile failed: ...)"."""
        if self.decode_graph is None:
            return "eager"
        return self.decode_graph.mode

    @property
    def prefill_mode(self) -> str:
        """How steps that prefill run: "compiled halves" (engine/execution/compiled_prefill.py) or an eager
        mode worded as `decode_mode`'s."""
        if self.prefill_halves is None:
            return "eager"
        return "compiled halves" if self.prefill_halves.usable else self.prefill_halves.mode

    def warm_up(self) -> None:
        """A single-token forward pass, so that the first real step does not pay one-time costs;
        then the compiles (decode graph, prefill halves), before returning ("blocking") or in a
        thread ("background")."""
        self.compute_logits(self._scratch_batch(1))
        if self.decode_graph is None:
            return
        if self.compile_decode == "blocking":
            self._compile_graphs()
        else:
            self._background_compile = BackgroundCompile(self._compile_graphs, name="decode and prefill compile")
            self._background_compile.start()

    @property
    def compiling(self) -> bool:
        """Whether the background compile is still running. Its thread outlives the moment the
        last graph became usable by a few statements: from that moment the graphs count as
        compiled, so that the modes and `compile_progress` never say both at once."""
        return (
            self._background_compile is not None
            and self._background_compile.running
            and CompiledPart.COMPILING in (self.decode_graph.mode, self.prefill_halves.mode)
        )

    @property
    def compile_progress(self) -> CompileProgress | None:
        return self._compile_clock.progress() if self.compiling else None

    def close(self) -> None:
        """Stop a background compile still running and wait for its thread: the next engine must
        not be built, nor the process exit, while it runs (see engine/execution/background_compile.py)."""
        if self._background_compile is not None:
            self._background_compile.stop()
            if self._background_compile.stopped:
                for compiled in (self.decode_graph, self.prefill_halves):
                    if compiled.mode == compiled.COMPILING:
                        compiled.mode = compiled.STOPPED

    def _compile_graphs(self) -> None:
        """Compile the graphs a decode step can take (one sequence, two or more, and with a batched
        copy from BATCHED_ROWS on), then the prefill halves' (two rows or more, and from
        BATCHED_ROWS on), on the scratch block; each is used from the next step on (each step's
        `decode_compiled` says whether the decode graph was)."""
        self._compile_clock.start()
        with torch.inference_mode():
            examples = [self._decode_inputs(self._scratch_batch(size)) for size in self._compile_sizes]
            self.decode_graph.compile(examples)
            self.prefill_halves.compile(
                lambda halves: [
                    self._eager_logits(self._scratch_batch(size), halves) for size in self._compile_sizes[1:]
                ]
            )
        if self.decode_graph.usable and self.prefill_halves.usable:
            self._compile_clock.finished()

    def _scratch_batch(self, size: int) -> ScheduledBatch:
        """`size` one-token decodes writing into the scratch block (rows past its size share
        slots: what they write is never read). Their block tables are two scratch blocks wide
        (the graph's narrowest), so no padding block is read."""
        first_slot = self.scratch_block * self.block_size
        groups = len(self.layout.groups)
        entries = [
            ScheduledSequence(
                f"warm-up {row}",
                [0],
                0,
                [[self.scratch_block] * 2] * groups,
                [[first_slot + row % self.block_size]] * groups,
                True,
                SamplingParams(temperature=0.0),
                0,
            )
            for row in range(size)
        ]
        return ScheduledBatch(decodes=entries, prefills=[], block_size=self.block_size)

    def execute(self, batch: ScheduledBatch) -> list[int]:
        batch = batch.one_row_per_token()
        rows = [entry for entry in batch.sequences if entry.samples]
        logits = self.compute_logits(batch)
        return sample(logits, [entry.params for entry in rows], [entry.sample_seed for entry in rows])

    @torch.inference_mode()
    def compute_logits(self, batch: ScheduledBatch) -> torch.Tensor:
        """Float32 logits [sampling rows, vocab] for the entries that sample; sets
        `last_step_compiled`."""
        self.last_step_compiled = False
        # The graph returns a row of logits for every row: only a batch whose rows all sample
        # may use it, or a row's token would go to another.
        if (
            self.decode_graph is not None
            and self.decode_graph.usable
            and not batch.prefills
            and all(entry.samples for entry in batch.decodes)
        ):
            logits = self.decode_graph(*self._decode_inputs(batch))
            if logits is not None:
                self.last_step_compiled = True
                return logits
        halves = (
            self.prefill_halves.for_step(batch.num_decode_tokens + batch.num_prefill_tokens)
            if self.prefill_halves is not None
            else None
        )
        if halves is not None:
            try:
                return self._eager_logits(batch, halves)
            except Exception as exc:  # as the decode graph's: a failed compiled step is run again eagerly
                self.prefill_halves.fall_back(exc)
        return self._eager_logits(batch)

    def _eager_logits(self, batch: ScheduledBatch, halves: LayerHalves | None = None) -> torch.Tensor:
        """The eager model's logits for `compute_logits`; `halves` compiled ones for the parts of
        each layer either side of attention (engine/execution/compiled_prefill.py). Running a step again
        after a failure rewrites the same cache slots with the same values."""
        token_ids, positions, sample_rows = [], [], []
        slots = [[] for _ in self.layout.groups]
        for entry in batch.sequences:
            token_ids += entry.token_ids
            positions += range(entry.start_position, entry.context_len)
            for group_slots, entry_slots in zip(slots, entry.slot_mappings):
                group_slots += entry_slots
            if entry.samples:
                sample_rows.append(len(token_ids) - 1)
        metadata = self._attention_metadata(batch, slots, group_by_length=True)
        hidden = self.model(self._tensor(token_ids), self._tensor(positions), self.kv_caches, metadata, halves)
        return self.model.compute_logits(hidden[self._tensor(sample_rows)])

    def _decode_inputs(self, batch: ScheduledBatch) -> tuple:
        """The decode graph's arguments for a batch of one-token decodes."""
        decodes = batch.decodes
        slots = [[entry.slot_mappings[group][0] for entry in decodes] for group in range(len(self.layout.groups))]
        metadata = self._attention_metadata(batch, slots, group_by_length=False)
        return (
            self._tensor([entry.token_ids[0] for entry in decodes]),
            self._tensor([entry.start_position for entry in decodes]),
            self.kv_caches,
            metadata,
        )

    @torch.inference_mode()
    def sequence_logits(self, token_ids: list[int], block_size: int) -> torch.Tensor:
        """Float32 logits at every position of one sequence, computed in one prefill through the
        cache's first blocks, each KV group its own (for evaluation; the engine must have no
        request in flight)."""
        width = -(-len(token_ids) // block_size)
        if width * len(self.layout.groups) > self.scratch_block:
            raise ValueError(
                f"{len(token_ids)} tokens need {width} blocks in each of {len(self.layout.groups)} KV groups; "
                f"the cache has {self.scratch_block}"
            )
        tables = [list(range(group * width, (group + 1) * width)) for group in range(len(self.layout.groups))]
        slots = slot_mappings(tables, 0, len(token_ids), block_size)
        entry = ScheduledSequence("score", list(token_ids), 0, tables, slots, True, None, 0)
        batch = ScheduledBatch(decodes=[], prefills=[entry], block_size=block_size)
        metadata = self._attention_metadata(batch, slots, group_by_length=True)
        hidden = self.model(self._tensor(token_ids), self._tensor(range(len(token_ids))), self.kv_caches, metadata)
        return self.model.compute_logits(hidden)

    def _attention_metadata(
        self, batch: ScheduledBatch, slots: list[list[int]], group_by_length: bool
    ) -> AttentionMetadata:
        """`slots`: per KV group, the slot of every token in the batch. `group_by_length`: decodes
        attend in groups of similar context length (eager), or all together with a mask (the
        compiled graph, whose operators must not depend on the lengths)."""
        decodes = batch.decodes
        groups = range(len(self.layout.groups))
        # Short block tables are padded with block 0; the context length masks those slots out.
        # The compiled graph gets at least two columns: a width of 1 would be compiled separately.
        widest = max([len(entry.block_tables[0]) for entry in decodes] + [0 if group_by_length else 2])
        tables = [
            self._tensor(
                [entry.block_tables[group] + [0] * (widest - len(entry.block_tables[group])) for entry in decodes]
            )
            for group in groups
        ]
        prefills, query_start = [], len(decodes)
        for entry in batch.prefills:
            chunk_tables = [self._tensor(entry.block_tables[group]) for group in groups]
            prefills.append(PrefillChunk(query_start, len(entry.token_ids), entry.context_len, chunk_tables))
            query_start += len(entry.token_ids)
        context_lens = [entry.context_len for entry in decodes]
        buckets = length_buckets(context_lens, batch.block_size, self.device) if decodes and group_by_length else None
        return AttentionMetadata(
            slot_mappings=[self._tensor(group_slots) for group_slots in slots],
            decode_block_tables=tables,
            decode_context_lens=self._tensor(context_lens),
            decode_buckets=buckets,
            prefills=prefills,
        )

    def _tensor(self, values) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)


class DecodeGraph(CompiledPart):
    """The whole decode step (embedding, every layer, final norm and LM head) as one
    `torch.compile` graph. Eagerly, a 30-layer step issues about 1,500 small operators, each paying
    Python and dispatch time; compiled, the elementwise ones (norms, RoPE, SiLU, residual adds) are
    fused into generated loops and the matmuls and attention are called from one wrapper.

    The batch and block-table sizes are dynamic, so two graphs serve every batch: one for a single
    sequence (torch specialises sizes of 1) and one for two or more. `compile` builds both before
    the graph is used, so that no request waits minutes for a compile mid-run. It may run in its
    own thread while the engine serves eagerly: dynamo traces only the frames of the thread that
    calls the compiled function. If compiling or running the graph fails, decode stays eager for
    the rest of the engine's life and `mode` says why.
    """

    def __init__(self, model: CausalLM):
        super().__init__("decode step")
        # cpp_wrapper: the generated code that calls the kernels is C++ too, not Python: a faster
        # step for a slower first compile (docs/measurements.md, "Measured reasons behind the code").
        #
        # guard_filter_fn: the weights never change once the engine is built, so checking every
        # parameter and module attribute before each step costs time and buys nothing. Without
        # those guards, two engines' models must never share graphs: torch keeps graphs per code
        # object, so each engine compiles its own copy of forward_logits.
        self._compiled = torch.compile(
            with_own_code(model.forward_logits),
            options={
                "cpp_wrapper": True,
                "guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe,
            },
        )

    def compile(self, example_inputs: list[tuple]) -> None:
        """Run the graph once on each example, compiling it; then mark it usable."""
        try:
            for inputs in example_inputs:
                self._run(*inputs)
        except Exception as exc:  # torch.compile raises many types (backend, codegen, C++ toolchain)
            self.fall_back(exc)
            return
        self.mode = self.COMPILED

    def __call__(self, token_ids, positions, kv_caches, metadata: AttentionMetadata) -> torch.Tensor | None:
        """Logits for every row, or None once the graph has failed (the caller runs eagerly)."""
        try:
            return self._run(token_ids, positions, kv_caches, metadata)
        except Exception as exc:  # as in compile: a shape not seen yet recompiles, which can fail too
            self.fall_back(exc)
            return None

    def _run(self, token_ids, positions, kv_caches, metadata: AttentionMetadata) -> torch.Tensor:
        # Only the batch and block-table sizes vary; the weights and the KV cache keep static
        # shapes, which lets the compiler fold their sizes into the generated loops.
        for tensor in (
            token_ids,
            positions,
            metadata.decode_context_lens,
            *metadata.slot_mappings,
            *metadata.decode_block_tables,
        ):
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
        for tables in metadata.decode_block_tables:
            torch._dynamo.maybe_mark_dynamic(tables, 1)
        return self._compiled(token_ids, positions, kv_caches, metadata)
