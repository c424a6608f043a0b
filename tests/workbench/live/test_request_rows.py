"""The requests table's data without Qt: rows, timelines and the block map as the runner reports."""

from __future__ import annotations

from engine import EngineConfig, LLMEngine
from workbench.backends.local import LocalBackend
from workbench.backends.protocol import BLOCK_SHARED
from workbench.live.request_rows import RequestRows
from workbench.runs.runner import ScenarioRunner
from workbench.traffic.scenario import Scenario, ScenarioEvent


def test_rows_follow_each_request_from_arrival_to_its_end():
    config = EngineConfig(
        model="simulated:llama-2-7b@h100-80gb",
        num_kv_blocks=64,
        block_size=16,
        max_model_len=512,
        max_num_batched_tokens=64,
        long_prompt_threshold=0,
    )
    backend = LocalBackend(LLMEngine(config))
    rows = RequestRows(backend, backend.num_kv_blocks)
    scenario = Scenario(
        name="rows",
        engine=config,
        events=[ScenarioEvent(at_s=0.0, action="inject", count=2, prompt_tokens=100, output_tokens=3, tag="chat")],
    )
    runner = ScenarioRunner(backend, scenario)
    seconds = lambda: backend.clock() - runner.start_time  # noqa: E731
    runner.on_send = lambda request_id, prompt: rows.sent(request_id, runner.tags[request_id], prompt, seconds())
    runner.on_output = rows.output
    runner.on_request_end = lambda ended: rows.ended(ended, seconds())
    held = []

    def updated(update):
        rows.updated(update, seconds())
        rows.refresh()
        held.append(
            ((rows.block_map() >= 0).sum() + (rows.block_map() == BLOCK_SHARED).sum(), update.stats.kv_blocks_used)
        )

    runner.on_step = updated
    runner.run()
    first = rows.row("chat-0")
    events = [event for _, event in first.timeline]
    # 100 prompt tokens in a 64-token budget: two prefill chunks (the second shared with chat-1's first).
    assert events[0] == "arrived" and events[1] == "prefill 64 tokens" and events[2] == "prefill 36 tokens"
    # The final prefill chunk samples the first token; the next two steps decode (logged once).
    assert events[3:] == ["decoding", "finished (length: max_tokens (3))"]
    assert first.state == "finished" and len(first.output_token_ids) == 3 and len(first.prompt_token_ids) == 100
    assert first.ttft_ms is not None and rows.num_in_flight() == 0
    # After every step the map holds exactly the blocks the engine counts as used.
    assert all(drawn == used for drawn, used in held) and max(used for _, used in held) >= 7


def test_a_request_the_server_failed_is_shown_failed_with_the_servers_message():
    from engine.requests.metrics import RequestMetrics
    from workbench.runs.runner import EndedRequest

    backend = LocalBackend(
        LLMEngine(EngineConfig(model="simulated:llama-2-7b@h100-80gb", num_kv_blocks=8, max_model_len=64))
    )
    rows = RequestRows(backend, backend.num_kv_blocks)
    rows.sent("chat-0", "chat", [1, 2, 3], 0.0)
    metrics = RequestMetrics(
        arrival_time=0.0,
        num_prompt_tokens=3,
        finish_time=0.5,
        finish_reason="error",
        finish_detail="HTTP 500: out of memory",
    )
    rows.ended(EndedRequest("chat-0", "chat", metrics), 0.5)
    row = rows.row("chat-0")
    assert row.state == "failed" and row.timeline[-1] == (0.5, "failed (error: HTTP 500: out of memory)")
    assert rows.num_in_flight() == 0
