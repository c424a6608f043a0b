"""`workbench serve` (the bundled model, in its own process) under a hostile or careless client:
values out of range, text that is not Unicode, unknown models and paths, oversized bodies, and
clients that leave. Every answer is OpenAI's error shape, nothing stops the engine, and the
gauges return to zero."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from benchmarks.server_processes import wait_until
from tests.workbench.loopback_app import server_state

pytestmark = pytest.mark.slow  # loads SmolLM2 in the server


def assert_openai_error(response: httpx.Response, status: int, message: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status
    assert message in error["message"], error["message"]


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        (
            "/v1/completions",
            {"prompt": "hi", "top_k": 2**63},
            400,
            "top_k: expected at most the vocabulary size (49152)",
        ),
        (
            "/v1/completions",
            {"prompt": "hi", "top_k": -2},
            400,
            "top_k: expected -1 or 0 (off) or a positive integer, got -2",
        ),
        ("/v1/completions", {"prompt": "hi", "min_p": 2}, 400, "min_p: expected a number in [0, 1]"),
        ("/v1/completions", {"prompt": "hi", "logprobs": 1}, 400, "logprobs: not supported by workbench serve"),
        ("/v1/completions", {"prompt": "hi", "echo": True}, 400, "echo: not supported by workbench serve"),
        ("/v1/completions", {"prompt": "hi", "model": "gpt-4"}, 404, "The model `gpt-4` does not exist."),
        (
            "/v1/completions",
            {"prompt": "hi", "max_tokens": 600},
            400,
            "This model's maximum context length is 512 tokens. However, you requested 601 tokens (1 in the prompt, "
            "600 in the completion)",
        ),
        (
            "/v1/completions",
            {"prompt": "a \ud800 b"},
            400,
            "prompt: not valid Unicode: a lone surrogate '\\ud800' at character 2",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "\udfff"}]},
            400,
            "messages[0].content: not valid Unicode",
        ),
        ("/v1/completions", {"prompt": "hi", "stop": ["\ud800"]}, 400, "stop: not valid Unicode"),
        ("/v1/completions", {"prompt": "hi", "stop": ["x"] * 10_000}, 400, "stop: at most 64 stop strings, got 10000"),
        ("/v1/completions", {"prompt": "hi", "stop": ["x" * 257]}, 400, "stop: each stop string at most 256"),
        ("/v1/completions", {"prompt": [1, True]}, 400, "prompt.list[int].1: Input should be a valid integer"),
        # Past 64 bits (issue 58 #8): a 500 with a traceback and a request left registered.
        ("/v1/completions", {"prompt": "hi", "seed": 2**64}, 400, "seed: Input should be less than or equal to"),
        ("/v1/completions", {"prompt": "hi", "top_k": 2**70}, 400, "top_k: Input should be less than or equal to"),
        ("/v1/completions", {"prompt": [1, 10**20]}, 400, "prompt[1]: expected a token id of at most 64 bits"),
    ],
)
def test_out_of_range_values_are_refused_as_vllm_refuses_them(server, path, body, status, message):
    # As JSON escapes (json.dumps' default): a lone surrogate cannot be sent as UTF-8.
    answer = httpx.post(
        f"{server}{path}", content=json.dumps(body), headers={"content-type": "application/json"}, timeout=30
    )
    assert_openai_error(answer, status, message)
    served = httpx.post(f"{server}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
    assert served.status_code == 200 and httpx.get(f"{server}/health").status_code == 200  # the engine goes on


def test_unknown_paths_methods_and_bodies_get_openai_error_bodies(server):
    assert_openai_error(httpx.get(f"{server}/v1/nothing-here"), 404, "Not Found")
    assert_openai_error(httpx.get(f"{server}/v1/completions"), 405, "Method Not Allowed")
    not_utf8 = httpx.post(
        f"{server}/v1/completions",
        content=b'{"prompt": "\xff\xfe"}',
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert_openai_error(not_utf8, 400, "error parsing the body")


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    huge = b'{"prompt": "' + b"a" * (9 << 20) + b'"}'
    answer = httpx.post(
        f"{server}/v1/completions", content=huge, headers={"content-type": "application/json"}, timeout=60
    )
    assert_openai_error(answer, 413, "larger than this server's limit of 8,388,608 bytes (serve --max-request-bytes)")


def test_a_chunked_body_over_the_limit_is_refused_as_it_arrives(server):
    """Issue 58 #7: without a Content-Length the limit was never checked (a 600 MiB chunked body
    got 200). The body comes in 1 MiB chunks; the refusal comes once 8 MiB have arrived."""

    def chunks():
        yield b'{"prompt": "'
        for _ in range(64):
            yield b"a" * (1 << 20)
        yield b'"}'

    answer = httpx.post(
        f"{server}/v1/completions", content=chunks(), headers={"content-type": "application/json"}, timeout=60
    )
    assert "content-length" not in answer.request.headers and answer.request.headers["transfer-encoding"] == "chunked"
    assert_openai_error(answer, 413, "request body of more than 8,388,608 bytes is larger than this server's limit")
    assert httpx.post(f"{server}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=60).status_code == 200


def test_rejected_requests_are_not_counted_as_successes(server):
    assert_openai_error(
        httpx.post(f"{server}/v1/completions", json={"prompt": list(range(600)), "max_tokens": 4}, timeout=30),
        400,
        "max_model_len",
    )
    assert 'finished_reason="rejected"' not in httpx.get(f"{server}/metrics").text


def test_a_client_that_leaves_a_non_streaming_request_aborts_it(server, tokenizer):
    """vLLM aborts on disconnect; ours kept generating (10 clients that left after 1 s still had
    15,000 tokens generated) and held shutdown for minutes."""
    generated_before = server_state(server).generation_tokens_total
    body = {
        "prompt": tokenizer.encode("Tell me a long story."),
        "max_tokens": 400,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server}/v1/completions", json=body, timeout=httpx.Timeout(30, read=1.0))
    wait_until(
        lambda: server_state(server).num_running == 0 and server_state(server).kv_usage == 0.0,
        "the abandoned request to be aborted",
    )
    assert server_state(server).generation_tokens_total - generated_before < 400


def test_many_streams_that_leave_in_every_phase_leave_nothing_behind(server, tokenizer):
    """Streams closed before their first token, after it, and mid-way, 40 at once: the gauges
    return to zero and the server still answers."""
    body = {"prompt": tokenizer.encode("Once upon a time"), "max_tokens": 200, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=64)) as client:
        streams = [client.stream("POST", f"{server}/v1/completions", json=body) for _ in range(40)]
        responses = [stream.__enter__() for stream in streams]
        for index, response in enumerate(responses):
            lines = response.iter_lines()
            for _ in range(index % 3 * 3):  # 0, 3 or 6 lines read before leaving
                next(lines, None)
        for stream in streams:
            stream.__exit__(None, None, None)
    wait_until(
        lambda: (lambda now: now.num_running == 0 and now.num_waiting == 0 and now.kv_usage == 0.0)(
            server_state(server)
        ),
        "every abandoned stream to be aborted",
    )
    assert httpx.post(f"{server}/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30).status_code == 200


def test_a_slow_reader_holds_only_its_own_request(server, tokenizer):
    """A client that reads its stream a line at a time, slowly, while another request is served
    whole: the other one is not held back by it, and once the slow one leaves the gauges return
    to zero."""
    body = {"prompt": tokenizer.encode("Once upon a time"), "max_tokens": 300, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{server}/v1/completions", json=body, timeout=60) as slow:
        lines = slow.iter_lines()
        next(lines)  # the first chunk: the request is running
        whole = httpx.post(
            f"{server}/v1/completions", json={"prompt": "hi", "max_tokens": 8, "ignore_eos": True}, timeout=60
        )
        assert whole.status_code == 200 and whole.json()["usage"]["completion_tokens"] == 8
        for _ in range(3):
            next(lines)
            time.sleep(0.2)
    wait_until(
        lambda: (lambda now: now.num_running == 0 and now.kv_usage == 0.0)(server_state(server)),
        "the slow reader's request to end",
    )


def test_a_request_that_exactly_fills_the_context_is_served_and_max_completion_tokens_is_honoured(server):
    """As vLLM: prompt + max_tokens equal to max_model_len (512 here) is served, not refused; a
    chat's `max_completion_tokens` caps its output when `max_tokens` is not given."""
    fills = httpx.post(
        f"{server}/v1/completions", json={"prompt": [1] * 508, "max_tokens": 4, "ignore_eos": True}, timeout=60
    )
    assert fills.status_code == 200, fills.text
    assert fills.json()["usage"] == {"prompt_tokens": 508, "completion_tokens": 4, "total_tokens": 512}
    chat = httpx.post(
        f"{server}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 3, "ignore_eos": True},
        timeout=60,
    )
    assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] == 3, chat.text
