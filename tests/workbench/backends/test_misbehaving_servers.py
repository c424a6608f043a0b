"""The remote backend against a server that misbehaves: whatever it sends, every request ends
(with an error and a detail), the run ends and is reported, and an odd /v1/models or /metrics
answer is a message, not a traceback (`bench --server` hung forever on token ids that were
strings, and a non-integer usage count lost the report)."""

from __future__ import annotations

import json
import time

import pytest

from engine import EngineError, SamplingParams
from engine.loading.model_source import read_tokenizer
from tests.workbench.loopback_app import served
from tests.workbench.misbehaving_server import GARBAGE, GOOD_METRICS, Misbehaviour, misbehaving_app, token_event
from workbench.backends.remote import ERROR, SCRAPE_INTERVAL_S, RemoteBackend
from workbench.bench.headless import run_headless
from workbench.traffic.presets import load_preset


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


def test_a_request_that_exactly_fills_the_servers_context_is_sent_one_more_token_is_refused(tokenizer):
    """/v1/models says 2,048 tokens: 2,040 + 8 is sent, as vLLM serves it; 2,041 + 8 is refused
    before it is sent, naming both lengths."""
    with served(misbehaving_app(Misbehaviour())) as url:
        backend = RemoteBackend(url, tokenizer)
        try:
            params = SamplingParams(max_tokens=8, ignore_eos=True)
            backend.submit([5] * 2_040, params, request_id="fits", arrival_time=backend.clock())
            with pytest.raises(EngineError, match=r"prompt \(2041 tokens\) \+ max_tokens \(8\) exceed .*\(2048\)"):
                backend.submit([5] * 2_041, params, request_id="over", arrival_time=backend.clock())
            ended = {}
            while backend.has_unfinished():
                ended.update({output.request_id: output for output in backend.advance().outputs if output.finished})
        finally:
            backend.close()
    assert list(ended) == ["fits"] and ended["fits"].finish_reason == "length"


def scrape_of(prompt_tokens: int) -> str:
    return GOOD_METRICS + f"# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total {prompt_tokens}\n"


def test_each_scrape_counts_the_prompt_tokens_the_server_added_since_the_last():
    """The server's vllm:prompt_tokens_total goes 0, 100, 250: the scrapes read as steps of 100
    and 150 prefilled tokens (swapped arguments to the delta read every one as 0)."""
    scrape = scrape_of
    with served(misbehaving_app(Misbehaviour(metrics=[scrape(0), scrape(100), scrape(250)]))) as url:
        backend = RemoteBackend(url, read_tokenizer("smollm2-135m"))
        try:
            prefilled = []
            deadline = time.monotonic() + 30
            while sum(prefilled) < 250 and time.monotonic() < deadline:
                stats = backend.advance().stats
                if stats is not None and stats.prefill_tokens:
                    prefilled.append(stats.prefill_tokens)
        finally:
            backend.close()
    assert prefilled == [100, 150]


def test_scrapes_that_land_between_two_updates_lose_no_tokens():
    """Several scrapes before the caller's next update (a long pause in the window's loop): their
    tokens and time add up in that update. Only the latest used to be kept (100 of 250 lost)."""
    counts = [0, 100, 250]
    with served(misbehaving_app(Misbehaviour(metrics=[scrape_of(count) for count in counts]))) as url:
        backend = RemoteBackend(url, read_tokenizer("smollm2-135m"))
        try:
            time.sleep(4 * SCRAPE_INTERVAL_S)  # the scraper reads 0, 100 and 250 meanwhile
            stats = backend.advance().stats
        finally:
            backend.close()
    assert stats.prefill_tokens == 250 and stats.step_duration_s >= 2 * SCRAPE_INTERVAL_S * 0.9
