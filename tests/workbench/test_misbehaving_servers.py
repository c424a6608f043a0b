"""The remote backend against a server that misbehaves: whatever it sends, every request ends
(with an error and a detail), the run ends and is reported, and an odd /v1/models or /metrics
answer is a message, not a traceback (`bench --server` hung forever on token ids that were
strings, and a non-integer usage count lost the report)."""

from __future__ import annotations

import json

import pytest

from engine import EngineError, SamplingParams
from tests.workbench.loopback_app import served
from tests.workbench.misbehaving_server import GARBAGE, GOOD_METRICS, Misbehaviour, misbehaving_app, token_event
from workbench.backends.remote import ERROR, RemoteBackend
from workbench.headless import run_headless
from workbench.presets import load_preset


def ended_requests(backend: RemoteBackend, count: int) -> dict:
    for index in range(count):
        backend.submit([1, 2, 3], SamplingParams(max_tokens=4), request_id=f"r{index}", arrival_time=backend.clock())
    ended = {}
    while backend.has_unfinished():
        ended.update({output.request_id: output for output in backend.advance().outputs if output.finished})
    return ended


@pytest.mark.parametrize(
    "answer, message",
    [
        ("5", "without a model list: not an OpenAI-compatible server"),
        ('{"data": "fake"}', "without a model list"),
        ('{"data": ["smollm"]}', "without a model list"),
        (
            '{"data": [{"id": "m", "max_model_len": "2048"}]}',
            "max_model_len of 'm': expected a positive integer, got '2048'",
        ),
        (
            '{"data": [{"id": "m", "max_model_len": Infinity}]}',
            "max_model_len of 'm': expected a positive integer, got inf",
        ),
        ('{"data": []}', "serves no model"),
    ],
)
def test_an_odd_model_list_is_one_message(tokenizer, answer, message):
    with served(misbehaving_app(Misbehaviour(models=answer))) as url:
        with pytest.raises(EngineError, match=message.replace("(", r"\(").replace(")", r"\)")):
            RemoteBackend(url, tokenizer)


@pytest.mark.parametrize(
    "events, detail",
    [
        ([token_event(["a"])], "the server sent token_ids that are not non-negative integers: ['a']"),
        ([token_event([1.5])], "token_ids that are not non-negative integers: [1.5]"),
        ([token_event([-1])], "token_ids that are not non-negative integers: [-1]"),
        ([token_event([True])], "token_ids that are not non-negative integers: [True]"),
        (
            [token_event([5], "length"), json.dumps({"choices": [], "usage": {"prompt_tokens": "abc"}})],
            "the server sent usage.prompt_tokens that is not a count: 'abc'",
        ),
        (["not json at all"], "the server sent an event that is not JSON: 'not json at all'"),
        (["[1, 2]"], "the server sent an event that is not a completion chunk: '[1, 2]'"),
        ([json.dumps({"choices": [5]})], "the server sent a choice that is not an object: 5"),
        ([json.dumps({"choices": [], "usage": [1]})], "the server sent a usage that is not an object: [1]"),
        (["x" * (600 << 10)], "the server sent an event line over 512 KiB (aiohttp's limit)"),
        ([token_event([5])], "the stream ended without a finish reason"),
    ],
)
def test_whatever_a_stream_sends_every_request_ends_with_a_detail(tokenizer, events, detail):
    with served(misbehaving_app(Misbehaviour(events=events))) as url:
        backend = RemoteBackend(url, tokenizer)
        try:
            ended = ended_requests(backend, 3)
        finally:
            backend.close()
    assert sorted(ended) == ["r0", "r1", "r2"]
    for output in ended.values():
        assert output.finish_reason == ERROR and detail in output.metrics.finish_detail, output.metrics.finish_detail


def test_latency_is_timed_from_the_chunks_as_they_arrive(tokenizer):
    """TTFT from the first chunk, each token's time from its own chunk, the prompt length from
    the usage the server reports."""
    events = [
        token_event([5]),
        token_event([6, 7]),
        token_event([8], "length"),
        json.dumps({"choices": [], "usage": {"prompt_tokens": 42}}),
    ]
    with served(misbehaving_app(Misbehaviour(events=events, event_gap_s=0.05))) as url:
        backend = RemoteBackend(url, tokenizer)
        try:
            (ended,) = ended_requests(backend, 1).values()
        finally:
            backend.close()
    metrics = ended.metrics
    assert ended.finish_reason == "length" and ended.token_ids == [5, 6, 7, 8]
    times = metrics.token_times
    assert metrics.first_token_time == times[0] < times[1] == times[2] < times[3] <= metrics.finish_time
    assert metrics.arrival_time < metrics.first_token_time and metrics.num_prompt_tokens == 42


def test_a_silent_server_ends_each_request_after_the_request_timeout(tokenizer):
    with served(misbehaving_app(Misbehaviour(silent=True))) as url:
        backend = RemoteBackend(url, tokenizer, request_timeout_s=0.5)
        try:
            ended = ended_requests(backend, 2)
        finally:
            backend.close()
    assert {output.metrics.finish_detail for output in ended.values()} == {
        "timed out: the server sent nothing for 0.5 s (--request-timeout)"
    }


def test_unreadable_metrics_at_start_mean_no_server_state_and_say_why(tokenizer):
    with served(misbehaving_app(Misbehaviour(metrics=[GARBAGE]))) as url:
        backend = RemoteBackend(url, tokenizer)
        try:
            assert not backend.capabilities.kv_cache and not backend.capabilities.queues
            assert (
                "GET /metrics: ValueError: not Prometheus text format"
                in backend.describe()["engine"]["server_state_problem"]
            )
            assert all(output.finish_reason == "length" for output in ended_requests(backend, 2).values())
        finally:
            backend.close()


def test_metrics_that_turn_to_garbage_mid_run_make_the_report_incomplete_and_say_why(tokenizer, tmp_path):
    """The scraper used to die silently while the report said complete; a request with a bad
    usage count used to lose the whole report."""
    events = [token_event([5], "length"), json.dumps({"choices": [], "usage": {"prompt_tokens": 2.5}})]
    scenario = load_preset(
        "chat-burst", ["traffic.num_requests=4", "traffic.output_len.kind=fixed", "traffic.output_len.mean=4"]
    )
    with served(misbehaving_app(Misbehaviour(metrics=[GOOD_METRICS] * 2 + [GARBAGE], events=events))) as url:
        backend = RemoteBackend(url, tokenizer)
        try:
            report = run_headless(scenario, tmp_path, backend=backend)
        finally:
            backend.close()
    assert report["metrics"]["requests_failed"]["value"] == 4
    assert not report["complete"]
    assert any(
        "/metrics scrapes failed, so the server's state has gaps (last: GET /metrics: ValueError: not Prometheus text"
        in reason
        for reason in report["incomplete_because"]
    ), report["incomplete_because"]
    assert json.loads((tmp_path / "report.json").read_text())["incomplete_because"] == report["incomplete_because"]
