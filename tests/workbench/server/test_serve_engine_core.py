"""`workbench serve`'s engine core and API, the core in a thread of this process over the same
messages as a core process, with an engine the test controls: a failing step ends the requests it
touched with an error while the core, /health and later requests go on; text is tokenized off the
event loop. tests/workbench/server/test_serving.py runs the core in its own process."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import torch

from benchmarks.server_processes import wait_until
from engine import EngineConfig, LLMEngine
from tests.tiny_models import tiny_engine
from tests.workbench.loopback_app import served
from workbench.server.engine_client import EngineCoreClient
from workbench.server.openai_api import create_app
from workbench.server.run import split_cores


@pytest.fixture
def serving():
    """(base URL, core client) for an engine, stopped after the test."""
    started = []

    def start(engine, **options):
        core = EngineCoreClient.start_in_thread(engine, "test-model")
        context = served(create_app(core, **options))
        started.append((context, core))
        return context.__enter__(), core

    yield start
    for context, core in started:
        context.__exit__(None, None, None)
        core.stop()


def planted_failure(engine, count: int = 1):
    """The engine's next `count` executions raise, as a step with a bug would."""
    execute = engine.executor.execute
    left = [count]

    def failing(batch):
        if left[0]:
            left[0] -= 1
            raise RuntimeError("planted failure")
        return execute(batch)

    engine.executor.execute = failing


def test_a_failing_step_ends_its_requests_with_an_error_and_the_server_goes_on(serving, tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory)
    url, core = serving(engine)
    planted_failure(engine)
    body = {"prompt": [1, 2, 3], "max_tokens": 5, "ignore_eos": True}
    answers = {}
    streamed = threading.Thread(
        target=lambda: answers.update(
            stream=httpx.post(f"{url}/v1/completions", json={**body, "stream": True}, timeout=30).text
        )
    )
    streamed.start()
    answers["whole"] = httpx.post(f"{url}/v1/completions", json=body, timeout=30)
    streamed.join()
    whole = answers["whole"]
    assert whole.status_code in (200, 500)  # whichever request the failed step held
    if whole.status_code == 500:
        assert whole.json()["error"]["message"].startswith("the engine step failed: RuntimeError: planted failure")
    else:
        assert "the engine step failed: RuntimeError: planted failure" in answers["stream"]
    assert httpx.get(f"{url}/health").status_code == 200
    after = httpx.post(f"{url}/v1/completions", json=body, timeout=30)
    assert after.status_code == 200 and after.json()["usage"]["completion_tokens"] == 5
    assert engine.block_manager.num_used_blocks == 0 or not engine.has_unfinished()


def test_an_engine_that_cannot_end_its_failed_requests_stops_serving_and_says_why(serving, tiny_llama, monkeypatch):
    directory, _ = tiny_llama
    engine = tiny_engine(directory)
    url, core = serving(engine)
    planted_failure(engine)

    def broken_end(detail):
        raise RuntimeError("the scheduler's state is broken")

    monkeypatch.setattr(engine, "fail_unfinished", broken_end)
    answer = httpx.post(f"{url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 5}, timeout=30)
    assert answer.status_code == 500
    health = httpx.get(f"{url}/health")
    assert health.status_code == 503 and "ending its requests failed too" in health.json()["error"]["message"]
    refused = httpx.post(f"{url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 5}, timeout=30)
    assert refused.status_code == 503 and refused.json()["error"]["type"] == "ServiceUnavailableError"


def test_a_request_sent_after_the_shutdown_began_is_refused_and_never_reaches_the_engine(
    serving, tiny_llama, monkeypatch
):
    """Once the shutdown has ended every request, a later one is answered 503 at once: added, it
    would be stepped after the HTTP event loop closed, and delivering its tokens there stopped
    the engine loop's thread."""
    directory, _ = tiny_llama
    engine = tiny_engine(directory)
    added = []
    add_request = engine.add_request
    monkeypatch.setattr(
        engine, "add_request", lambda *args, **kwargs: (added.append(1), add_request(*args, **kwargs))[1]
    )
    url, core = serving(engine)
    body = {"prompt": [1, 2, 3], "max_tokens": 5, "ignore_eos": True}
    assert httpx.post(f"{url}/v1/completions", json=body, timeout=30).status_code == 200
    core.end_all_requests()
    refused = httpx.post(f"{url}/v1/completions", json=body, timeout=30)
    assert refused.status_code == 503 and refused.json()["error"]["message"] == "the server is shutting down"
    assert len(added) == 1 and not engine.has_unfinished()


def test_a_refusal_is_the_requests_first_output_and_a_submit_waits_for_no_answer(serving, tiny_llama, monkeypatch):
    """Issue 60 #2 / 61 #4: every submit waited for the core's acknowledgement (a round trip on
    each request's path). A submit now only sends; what add_request refuses comes back as the
    request's end, its first output, and the API answers 400 with the engine's words, streamed
    or not, while the core serves on."""
    import inspect

    from engine import EngineError
    from workbench.server import core_protocol

    assert not inspect.iscoroutinefunction(EngineCoreClient.submit)
    assert "RequestAdded" not in dir(core_protocol)
    directory, _ = tiny_llama
    engine = tiny_engine(directory)
    add_request = engine.add_request

    def refusing(prompt, params, **kwargs):
        if params.max_tokens == 7:
            raise EngineError("planted refusal: seven tokens are never served")
        return add_request(prompt, params, **kwargs)

    monkeypatch.setattr(engine, "add_request", refusing)
    url, core = serving(engine)
    for stream in (False, True):
        refused = httpx.post(
            f"{url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 7, "stream": stream}, timeout=30
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["message"] == "planted refusal: seven tokens are never served"
    served_after = httpx.post(f"{url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 5}, timeout=30)
    assert served_after.status_code == 200 and not engine.has_unfinished()


@pytest.mark.slow  # the bundled model, for its tokenizer
def test_text_is_tokenized_off_the_event_loop(serving, monkeypatch):
    """While one prompt is being tokenized, /health still answers (a 10 MB prompt froze the
    server for 6 s, /health included)."""
    engine = LLMEngine(EngineConfig(max_model_len=512, kv_cache_memory=16 << 20))
    url, core = serving(engine)
    entered, release = threading.Event(), threading.Event()
    encode = engine.tokenizer.encode

    def slow_encode(text, *args, **kwargs):
        entered.set()
        release.wait(timeout=60)
        return encode(text, *args, **kwargs)

    monkeypatch.setattr(engine.tokenizer, "encode", slow_encode)
    answers = []
    sender = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{url}/v1/completions", json={"prompt": "Hello", "max_tokens": 2}, timeout=60)
        )
    )
    sender.start()
    assert entered.wait(timeout=30)
    try:
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # the event loop is free
    finally:
        release.set()
        sender.join()
    assert answers[0].status_code == 200


@pytest.mark.slow  # compiles the tiny model's decode graph
def test_requests_wait_for_the_compile_and_health_says_warming_up(serving, tiny_llama, held_compile):
    """No step runs beside the compile: a request sent meanwhile waits (and counts as waiting),
    /health answers 503 "warming up"; once compiled, the request is served by the compiled graph."""
    torch._dynamo.reset()
    directory, _ = tiny_llama
    engine = tiny_engine(directory, compile_decode="background")
    url, core = serving(engine)
    answers = []
    sent = threading.Thread(
        target=lambda: answers.append(
            httpx.post(
                f"{url}/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 4, "ignore_eos": True}, timeout=600
            )
        )
    )
    sent.start()
    waiting = 'vllm:num_requests_waiting{model_name="test-model"} 1.0'
    wait_until(lambda: waiting in httpx.get(f"{url}/metrics").text, "the request to be held")
    health = httpx.get(f"{url}/health")
    assert health.status_code == 503
    assert health.json()["error"]["message"].startswith("warming up: compiling the decode and prefill graphs: ")
    time.sleep(0.5)
    assert engine.num_steps == 0 and not answers  # held, not served eagerly beside the compile
    held_compile.set()
    sent.join(timeout=600)
    assert answers[0].status_code == 200 and answers[0].json()["usage"]["completion_tokens"] == 4
    assert engine.executor.decode_mode == "compiled" and httpx.get(f"{url}/health").status_code == 200


def test_reserved_cores_go_to_http_and_the_engine_core_keeps_at_least_one(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert split_cores(0) is None  # both processes on every core
    assert split_cores(1) == ([0], [1, 2, 3])
    assert split_cores(3) == ([0, 1, 2], [3])
    assert split_cores(9) == ([0, 1, 2], [3])
