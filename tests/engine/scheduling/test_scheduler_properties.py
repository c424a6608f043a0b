"""Property tests: random engine configurations and random traffic (adds, aborts of every kind,
steps) on the simulated executor, with the scheduler's and block manager's invariants checked
after every step and at the end."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.model_spec.kv_layout import KvLayout
from engine.simulation import catalogue
from tests.engine.simulated import hang_guard
from workbench.backends.local import LocalBackend
from workbench.step_traces.block_replay import BlockReplay

MAX_STEPS_TO_DRAIN = 5_000


@st.composite
def sliding_windows(draw) -> dict:
    """The simulated model's sliding-window layers (engine/model_spec/kv_layout.py): none, Gemma 3's five
    local layers to one global, or every layer (Mistral), with windows that slide within the
    short contexts drawn here."""
    pattern = draw(st.sampled_from(["none", "gemma", "all"]))
    if pattern == "none":
        return {}
    sliding = tuple(layer for layer in range(32) if pattern == "all" or (layer + 1) % 6)
    return {"sliding_window": draw(st.integers(1, 24)), "sliding_layers": sliding}


@contextlib.contextmanager
def simulated_shape(changes: dict):
    """The catalogue's model with `changes` applied, for engines built inside the block."""
    shape, source = catalogue.model_shape("llama-2-7b")
    with mock.patch("engine.simulation.model_shape", lambda name: (dataclasses.replace(shape, **changes), source)):
        yield


@st.composite
def engine_configs(draw) -> tuple[EngineConfig, dict]:
    """A configuration, and the changes to the simulated model's shape it runs with."""
    block_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    max_model_len = draw(st.integers(2, 128))
    max_num_batched_tokens = draw(st.integers(1, 128))
    windows = draw(sliding_windows())
    # Tiny caches: from one full-length request to a few of them, so that requests compete.
    layout = KvLayout.of(dataclasses.replace(catalogue.model_shape("llama-2-7b")[0], **windows))
    blocks_per_request = layout.blocks_held(max_model_len, block_size, max_num_batched_tokens)
    num_kv_blocks = draw(st.integers(blocks_per_request, 3 * blocks_per_request + 2))
    config = EngineConfig(
        model="simulated:llama-2-7b@h100-80gb",
        block_size=block_size,
        num_kv_blocks=num_kv_blocks,
        max_model_len=max_model_len,
        enable_chunked_prefill=draw(st.booleans()),
        enable_prefix_caching=draw(st.booleans()),
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
        max_num_seqs=draw(st.integers(1, 16)),
        max_num_batched_tokens=max_num_batched_tokens,
        long_prompt_threshold=draw(st.integers(0, 64)),
        max_long_prefills=draw(st.integers(1, 3)),
        long_prompt_max_wait_s=draw(st.sampled_from([0.0, 0.001, 1.0])),
    )
    return config, windows


ADD = st.tuples(
    st.just("add"),
    st.integers(0, 3),  # which shared prefix (0 = none)
    # The rest of the prompt: few distinct ids (prefixes repeat), now and then over-long.
    st.one_of(st.lists(st.integers(0, 5), max_size=40), st.lists(st.integers(0, 5), min_size=100, max_size=220)),
    st.integers(1, 64),  # max_tokens
    st.integers(0, 3),  # priority
)
BURST = st.tuples(  # several requests at once: competition for slots, blocks and budget
    st.just("burst"),
    st.integers(2, 12),  # how many
    st.integers(0, 3),  # shared prefix
    st.integers(0, 40),  # prompt length of the first; each next one is a token longer
    st.integers(1, 64),  # max_tokens
)
ABORT = st.tuples(
    st.just("abort"), st.sampled_from(["waiting", "running", "finished", "unknown"]), st.integers(0, 1000)
)
STEP = st.tuples(st.just("step"), st.integers(1, 6))
OPERATIONS = st.lists(st.one_of(ADD, BURST, ABORT, STEP), min_size=1, max_size=60)
PREFIXES = {1: [1, 2, 3, 4, 5, 6, 7, 8], 2: [1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 9, 9, 9], 3: list(range(30))}


class Checked:
    """An engine whose every executed batch and step is checked against the invariants."""

    def __init__(self, config: EngineConfig):
        self.engine = LLMEngine(config)
        self.config = config
        self.added: dict[str, int] = {}  # request id -> max_tokens
        self.finishes: Counter[str] = Counter()
        self.output_lengths: dict[str, int] = {}
        self.replay = BlockReplay(config.num_kv_blocks)  # the block map rebuilt from the step traces
        execute = self.engine.executor.execute

        def checked_execute(batch):
            self.check_batch(batch)
            return execute(batch)

        self.engine.executor.execute = checked_execute

    def check_batch(self, batch) -> None:
        config = self.config
        assert batch.num_prefill_tokens + batch.num_decode_tokens <= config.max_num_batched_tokens
        assert len(batch.sequences) <= config.max_num_seqs
        assert all(len(entry.token_ids) == 1 and entry.samples for entry in batch.decodes)
        assert all(entry.token_ids for entry in batch.sequences)
        assert len({entry.request_id for entry in batch.sequences}) == len(batch.sequences)

    def add(self, prefix: int, rest: list[int], max_tokens: int, priority: int) -> None:
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        request_id = self.engine.add_request(PREFIXES.get(prefix, []) + rest, params, priority=priority)
        self.added[request_id] = max_tokens

    def abort(self, kind: str, pick: int) -> None:
        scheduler = self.engine.scheduler
        pools = {
            "waiting": [seq.request_id for seq in [*scheduler.waiting, *scheduler.waiting_long]],
            "running": [seq.request_id for seq in scheduler.running],
            "finished": [request_id for request_id in self.finishes],
            "unknown": [f"no-such-request-{pick}"],
        }
        pool = pools[kind]
        if pool:
            request_id = pool[pick % len(pool)]
            assert self.engine.abort(request_id) == (kind in ("waiting", "running"))

    def step(self) -> None:
        engine = self.engine
        scheduler = engine.scheduler
        had_work = bool(scheduler.running or scheduler.waiting or scheduler.waiting_long)
        with hang_guard():
            result = engine.step()
        for output in result.outputs:
            if output.finished:
                self.finishes[output.request_id] += 1
                assert output.finish_reason in ("stop", "length", "abort", "rejected")
                self.output_lengths[output.request_id] = len(output.token_ids)
        if had_work:  # never a step that schedules nothing while a request could run
            assert result.stats.num_seqs > 0, "an empty step while requests wait"
        self.check_state()
        self.check_trace(result.trace)

    def check_trace(self, trace) -> None:
        """The step's trace balances, and replaying every trace so far gives the live block map."""
        manager = self.engine.block_manager
        assert (
            trace.kv_before.used_blocks + trace.blocks_taken() - trace.blocks_returned() == trace.kv_after.used_blocks
        )
        assert (trace.kv_after.used_blocks, trace.kv_after.free_blocks, trace.kv_after.cached_free_blocks) == (
            manager.num_used_blocks,
            manager.num_free_blocks,
            manager.num_cached_free_blocks,
        )
        # Every queue left non-empty by the step names its head and why it was not admitted.
        scheduler = self.engine.scheduler
        heads = {
            (queue.peek().request_id, name)
            for queue, name in ((scheduler.waiting, "waiting"), (scheduler.waiting_long, "waiting_long"))
            if queue
        }
        assert {(held.request_id, held.queue) for held in trace.held} == heads and all(
            held.reason for held in trace.held
        )
        self.replay.apply(trace)
        live = {seq.request_id: seq for seq in self.engine.scheduler.running}
        held = {request_id: set(manager.held_block_ids(seq)) for request_id, seq in live.items()}
        for block in manager.blocks:
            holders = {request_id for request_id, blocks in held.items() if block.block_id in blocks}
            assert self.replay.holders[block.block_id] == holders, f"block {block.block_id} at step {trace.step}"
            assert self.replay.findable[block.block_id] == (block.prefix_hash is not None)
        rows = {request_id: index for index, request_id in enumerate(live)}
        assert (self.replay.owners(rows) == LocalBackend(self.engine).block_owners(rows)).all()
        assert (self.replay.windowed == LocalBackend(self.engine).window_blocks()).all()

    def check_state(self) -> None:
        scheduler, manager = self.engine.scheduler, self.engine.block_manager
        holders: Counter[int] = Counter()
        for seq in scheduler.running:
            holders.update(manager.held_block_ids(seq))
            for window, table in zip(manager.windows, seq.block_tables):
                assert len(table) >= manager.blocks_to_cover(seq.num_computed_tokens)
                # A sliding-window group holds every block its next query reads, and no earlier one.
                first_visible = (
                    0 if window is None else max(seq.num_computed_tokens - window + 1, 0) // manager.block_size
                )
                assert all(block_id == manager.null_block for block_id in table[:first_visible])
                assert manager.null_block not in table[first_visible:]
        for seq in [*scheduler.waiting, *scheduler.waiting_long]:
            assert not seq.block_tables, f"waiting request {seq.request_id} holds blocks"
        for block in manager.blocks:
            assert block.ref_count == holders[block.block_id]
        assert set(manager._free) == {block.block_id for block in manager.blocks if block.ref_count == 0}
        for prefix_hash, block_id in manager._block_by_hash.items():
            assert manager.blocks[block_id].prefix_hash == prefix_hash
        assert sum(block.prefix_hash is not None for block in manager.blocks) == len(manager._block_by_hash)
        cached_free = sum(block.ref_count == 0 and block.prefix_hash is not None for block in manager.blocks)
        assert manager.num_cached_free_blocks == cached_free
        assert len(scheduler.running) <= self.config.max_num_seqs

    def drain(self) -> None:
        for _ in range(MAX_STEPS_TO_DRAIN):
            if not self.engine.has_unfinished():
                return
            self.step()
        raise AssertionError(f"livelock: requests still unfinished after {MAX_STEPS_TO_DRAIN} steps")


# 150 cases per run (the "workbench" profile, tests/conftest.py); `make mutation` runs fewer.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(engine_configs(), OPERATIONS)
def test_random_configurations_and_traffic_keep_every_invariant(config_and_windows, operations):
    config, windows = config_and_windows
    with simulated_shape(windows):
        checked = Checked(config)
    for operation in operations:
        kind, *arguments = operation
        if kind == "add":
            checked.add(*arguments)
        elif kind == "burst":
            count, prefix, length, max_tokens = arguments
            for index in range(count):
                checked.add(prefix, [index % 6] * (length + index), max_tokens, index % 4)
        elif kind == "abort":
            checked.abort(*arguments)
        else:
            for _ in range(arguments[0]):
                checked.step()
    checked.drain()
    engine = checked.engine
    assert checked.finishes == Counter(checked.added.keys()), "every request ends exactly once"
    assert engine.block_manager.num_used_blocks == 0 and engine.block_manager.num_free_blocks == config.num_kv_blocks
    assert not (engine.scheduler.running or engine.scheduler.waiting or engine.scheduler.waiting_long)
    for request_id, length in checked.output_lengths.items():
        assert length <= checked.added[request_id]
