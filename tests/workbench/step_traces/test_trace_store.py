"""The window's trace store: any kept step's trace and block map, the nearest step to a time,
the steps that touched a request, and a bounded memory that still replays exactly."""

from __future__ import annotations

from engine import SamplingParams
from tests.tiny_models import tiny_engine
from workbench.backends.local import LocalBackend
from workbench.step_traces.store import CHECKPOINT_STEPS, TraceStore


def test_the_block_map_at_any_kept_step_is_the_live_map_of_that_step_even_after_dropping_old_steps(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory, num_kv_blocks=40, block_size=4)  # small: preemptions and reuse
    store = TraceStore(engine.num_kv_blocks, capacity=CHECKPOINT_STEPS)
    backend, live_maps, rows = LocalBackend(engine), {}, {}
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    step = 0
    while step < 2 * CHECKPOINT_STEPS + 120:
        if step % 3 == 0:  # a steady stream sharing a prefix, so blocks are reused and freed
            request_id = engine.add_request([1, 2, 3, 4, 5, 6, 7, 8] + [step % 50 + 10] * (step % 9), params)
            rows[request_id] = len(rows)
        if step % 11 == 5:  # and aborts, whose blocks are released before the next step
            engine.abort(request_id)
        trace = engine.step().trace
        store.add(trace)
        if step % 37 == 0 or step > 2 * CHECKPOINT_STEPS + 100:
            live_maps[step] = backend.block_owners(
                {request_id: row for request_id, row in rows.items() if engine.sequence(request_id)}
            )
        step += 1
    first, last = store.step_range()
    assert first > 0 and last == step - 1  # the oldest steps were dropped a checkpoint at a time
    checked = [kept for kept in live_maps if kept >= first]
    assert len(checked) > 20
    for kept in checked:
        assert (store.owners_at(kept, rows) == live_maps[kept]).all(), kept
    assert store.owners_at(first - 1, rows) is None and store.trace(first - 1) is None


def test_nearest_step_trace_and_the_steps_that_touched_a_request(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory)
    ticks = iter(range(100_000))
    engine.clock = lambda: float(next(ticks))
    store = TraceStore(engine.num_kv_blocks)
    first = engine.add_request(
        [1, 2, 3], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True), request_id="a"
    )
    traces = [engine.step().trace for _ in range(2)]
    engine.add_request([4, 5, 6], SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True), request_id="b")
    while engine.has_unfinished():
        traces.append(engine.step().trace)
    for trace in traces:
        store.add(trace)
    assert store.nearest_step(traces[1].time_s + 0.4) == 1 and store.nearest_step(-5.0) == 0
    assert store.nearest_step(1e9) == traces[-1].step
    assert store.trace(1) == traces[1]
    touched_a = [step for step, _ in store.steps_touching(first)]
    assert touched_a == [0, 1, 2]  # prefill and sample, decode, the last decode and its release
    assert [step for step, _ in store.steps_touching("b")] == [2, 3]
