"""`workbench serve` and the remote backend, for real: the server runs as a subprocess on a free
loopback port with the bundled model, and every check goes over HTTP."""

from __future__ import annotations

import http.server
import json
import threading
import time

import httpx
import pytest

from benchmarks.server_processes import free_port, start_workbench_server, wait_until
from engine import EngineConfig, EngineError, LLMEngine, SamplingParams
from engine.loading.model_source import read_tokenizer
from tests.workbench.loopback_app import server_state
from workbench.backends.remote import RemoteBackend
from workbench.bench.headless import run_headless
from workbench.runs.run_log import read_run_log
from workbench.traffic.presets import load_preset

pytestmark = pytest.mark.slow  # loads SmolLM2 in the server


def test_greedy_tokens_over_http_are_the_in_process_engines(server, tokenizer):
    prompts = [tokenizer.encode(text) for text in ("The capital of France is", "Water boils at", "def fibonacci(n):")]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    backend = RemoteBackend(server, tokenizer)
    try:
        for index, prompt in enumerate(prompts):
            backend.submit(prompt, params, request_id=f"r{index}", arrival_time=backend.clock())
        ended = {}
        while backend.has_unfinished():
            ended.update({output.request_id: output for output in backend.advance().outputs if output.finished})
    finally:
        backend.close()
    local = LLMEngine(EngineConfig(max_model_len=512, kv_cache_memory=64 << 20)).generate(prompts, params)
    for index, expected in enumerate(local):
        assert ended[f"r{index}"].token_ids == expected.token_ids and ended[f"r{index}"].finish_reason == "length"
        metrics = ended[f"r{index}"].metrics
        assert (
            metrics.num_output_tokens == 12 and metrics.ttft_ms > 0 and metrics.num_prompt_tokens == len(prompts[index])
        )


def test_a_chat_goes_to_the_chat_endpoint_and_the_server_applies_its_template(server, tokenizer):
    messages = ({"role": "user", "content": "What is the capital of France?"},)
    templated = tokenizer.encode(tokenizer.apply_chat_template(list(messages)))
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    backend = RemoteBackend(server, tokenizer)
    try:
        # The ids sent alongside are a stand-in: the server must template the chat, not run them.
        backend.submit([1, 2, 3], params, request_id="chat", arrival_time=backend.clock(), messages=messages)
        ended = None
        while backend.has_unfinished():
            ended = next((output for output in backend.advance().outputs if output.finished), ended)
    finally:
        backend.close()
    (expected,) = LLMEngine(EngineConfig(max_model_len=512, kv_cache_memory=64 << 20)).generate([templated], params)
    assert ended.finish_reason == "length" and ended.token_ids == expected.token_ids
    assert ended.metrics.num_prompt_tokens == len(templated)  # from the server's usage


def test_a_sharegpt_preset_runs_as_chats_through_the_server(server, tmp_path):
    scenario = load_preset(
        "sharegpt-chat",
        ["traffic.num_requests=3", "traffic.rate=10", "traffic.output_len.low=4", "traffic.output_len.high=8"],
    )
    backend = RemoteBackend(server, read_tokenizer("smollm2-135m"))
    try:
        report = run_headless(scenario, tmp_path, backend=backend)
    finally:
        backend.close()
    assert report["complete"] and report["metrics"]["requests_finished"]["value"] == 3
    assert report["metrics"]["requests_failed"]["value"] == 0


def test_a_preset_through_the_server_gives_a_full_report_and_live_server_state(server, tmp_path):
    scenario = load_preset(
        "chat-steady",
        [
            "traffic.num_requests=8",
            "traffic.rate=8",
            "traffic.prompt_len.high=64",
            "traffic.output_len.mean=16",
            "traffic.output_len.high=24",
        ],
    )
    local = run_headless(
        load_preset("chat-steady", ["engine.model=simulated:llama-2-7b@h100-80gb", "traffic.num_requests=2"]),
        tmp_path / "local",
    )
    seen_usage = []
    watcher_done = threading.Event()

    def watch() -> None:
        while not watcher_done.is_set():
            seen_usage.append(server_state(server).kv_usage)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    backend = RemoteBackend(server, read_tokenizer("smollm2-135m"))
    try:
        report = run_headless(scenario, tmp_path / "remote", backend=backend)
    finally:
        backend.close()
        watcher_done.set()
        watcher.join()
    assert report["complete"] and report["metrics"]["requests_finished"]["value"] == 8
    assert set(report["metrics"]) >= set(local["metrics"]) - {key for key in local["metrics"] if "/" in key}
    assert report["backend"]["not_exposed"] == ["batch_composition", "block_map", "scheduled_events", "step_trace"]
    assert report["metrics"]["kv_usage_peak_perc"]["value"] > 0 and report["metrics"]["kv_usage_peak_perc"]["n"] > 0
    assert max(seen_usage) > 0
    wait_until(
        lambda: server_state(server).kv_usage == 0.0 and server_state(server).num_running == 0,
        "KV usage back to 0 after the run",
    )


def test_a_client_that_goes_away_frees_its_blocks(server, tokenizer):
    body = {
        "prompt": tokenizer.encode("Tell me a long story about a dragon."),
        "max_tokens": 400,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
    }
    generated_before = server_state(server).generation_tokens_total
    with httpx.stream("POST", f"{server}/v1/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):  # streaming: the request holds blocks while we read
                during = server_state(server)
                break
    assert during.kv_usage > 0 and during.num_running == 1
    # The stream is closed: the server aborts the request at its next step and frees its blocks.
    wait_until(
        lambda: server_state(server).kv_usage == 0.0 and server_state(server).num_running == 0,
        "the aborted request's blocks",
    )
    assert server_state(server).generation_tokens_total - generated_before < 400  # stopped, not run to its end
    assert (
        'vllm:request_success_total{finished_reason="abort",model_name="smollm2-135m"} 1.0'
        in httpx.get(f"{server}/metrics").text
    )


def test_a_stop_string_ends_the_text_before_it_streamed_or_whole(server):
    """The output ends before the stop string, as vLLM's does, and a stream never shows any of it:
    the engine holds back what may still begin one. The old server decoded the whole output for
    every chunk and returned the stop string in the whole answer."""
    body = {"prompt": "The capital of France is", "max_tokens": 40, "temperature": 0.0, "ignore_eos": True}
    free = httpx.post(f"{server}/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
    stop = free.split()[3]
    stopped_body = {**body, "stop": [stop, "never appears"] + [f"nor this {index}" for index in range(60)]}
    whole = httpx.post(f"{server}/v1/completions", json=stopped_body, timeout=60).json()["choices"][0]
    chunks, reasons = [], []
    with httpx.stream(
        "POST", f"{server}/v1/completions", json={**stopped_body, "stream": True}, timeout=60
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[len("data: ") :])["choices"][0]
                chunks.append(choice["text"])
                reasons.append(choice["finish_reason"])
    assert whole["finish_reason"] == "stop" and reasons[-1] == "stop"
    assert whole["text"] == "".join(chunks) == free[: free.index(stop)]
    assert not any(stop in chunk for chunk in chunks)


@pytest.mark.parametrize(
    "body, message",
    [
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens: expected a positive integer, got 0"),
        ({"max_tokens": 3}, "invalid request: prompt: Field required"),
        ({"prompt": "hi", "temperature": -1}, "temperature: expected a finite number >= 0"),
        ({"prompt": "hi", "n": 2}, "n: only 1 choice per request is served, got 2"),
        ({"prompt": list(range(600)), "max_tokens": 4}, "max_model_len"),
    ],
)
def test_invalid_requests_get_400_with_an_openai_error_body(server, body, message):
    response = httpx.post(f"{server}/v1/completions", json=body, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "BadRequestError" and message in error["message"]


def test_a_speculating_server_keeps_greedy_tokens_counts_its_drafts_and_refuses_sampling(tokenizer):
    """`serve --speculative-config` (vLLM's JSON): the tokens are the plain engine's, /metrics has
    vLLM's spec_decode counters and the remote backend reads them into its stats; a request with a
    temperature is refused with the reason."""
    port = free_port()
    speculation = '{"method": "ngram", "num_speculative_tokens": 3}'
    settings = ("--set", "engine.max_model_len=512", "--set", "engine.kv_cache_memory=67108864")
    process = start_workbench_server(port, "--speculative-config", speculation, *settings)
    url = f"http://127.0.0.1:{port}"
    prompt = tokenizer.encode("Copy: alpha beta gamma delta epsilon zeta\n" * 3 + "Copy:")
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    backend = RemoteBackend(url, tokenizer)
    try:
        backend.submit(prompt, params, request_id="copy", arrival_time=backend.clock())
        proposed = accepted = 0
        output = None
        while backend.has_unfinished() or not proposed:
            update = backend.advance()
            output = next((out for out in update.outputs if out.finished), output)
            if update.stats is not None:
                proposed, accepted = proposed + update.stats.proposed_tokens, accepted + update.stats.accepted_tokens
        response = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "temperature": 0.7}, timeout=30)
    finally:
        backend.close()
        process.terminate()
        process.wait(timeout=30)
    (expected,) = LLMEngine(EngineConfig(max_model_len=512, kv_cache_memory=64 << 20)).generate([prompt], params)
    assert output.token_ids == expected.token_ids
    assert proposed >= accepted > 0  # what the scrapes saw of the counters
    assert response.status_code == 400 and "temperature = 0.7: ngram speculative decoding" in response.text


def test_models_version_and_metrics_speak_vllms_dialect(server):
    models = httpx.get(f"{server}/v1/models").json()
    assert models["data"][0]["id"] == "smollm2-135m" and models["data"][0]["max_model_len"] == 512
    text = httpx.get(f"{server}/metrics").text
    for name in (
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
        "vllm:cache_config_info",
    ):
        assert name in text, name
    assert server_state(server).num_blocks > 0 and server_state(server).block_size == 16


def test_a_dropped_server_ends_each_request_with_an_error_and_the_run_goes_on(tokenizer):
    port = free_port()
    process = start_workbench_server(port, "--set", "engine.model=simulated:llama-2-7b@h100-80gb")
    backend = RemoteBackend(f"http://127.0.0.1:{port}", tokenizer)
    try:
        for index in range(3):
            backend.submit(
                list(range(1, 30)),
                SamplingParams(max_tokens=2000, ignore_eos=True),
                request_id=f"r{index}",
                arrival_time=backend.clock(),
            )
        first = []
        wait_until(lambda: first.extend(backend.advance().outputs) or first, "the first tokens")
        process.kill()
        process.wait()
        ended = {}
        while backend.has_unfinished():
            ended.update({output.request_id: output for output in backend.advance().outputs if output.finished})
    finally:
        backend.close()
    assert sorted(ended) == ["r0", "r1", "r2"]
    assert all(output.finish_reason == "error" and output.metrics.finish_detail for output in ended.values())


def test_no_server_or_not_an_openai_server_is_one_clear_message(tokenizer, tmp_path):
    with pytest.raises(EngineError, match=r"http://127.0.0.1:\d+: no server answers"):
        RemoteBackend(f"http://127.0.0.1:{free_port()}", tokenizer)
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(tmp_path))  # noqa: E731
    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    try:
        with pytest.raises(
            EngineError, match=r"/v1/models answered HTTP 404 without a model list: not an OpenAI-compatible server"
        ):
            RemoteBackend(f"http://127.0.0.1:{plain.server_address[1]}", tokenizer)
    finally:
        plain.shutdown()


def test_256_concurrent_streams_and_an_abort_from_the_client(tokenizer):
    """A simulated 7B on an H100, served in real time: 256 streams at once all finish; one request
    aborted by the client ends with "abort" and its blocks are freed; 20 aborted the moment they
    were submitted end with "abort" too (all 20 ran to their length: the abort found no task yet)."""
    port = free_port()
    process = start_workbench_server(
        port, "--set", "engine.model=simulated:llama-2-7b@h100-80gb", "--set", "engine.max_num_seqs=256"
    )
    url = f"http://127.0.0.1:{port}"
    backend = RemoteBackend(url, tokenizer)
    try:
        for index in range(20):
            gone = f"gone{index}"
            backend.submit(
                list(range(1, 40)), SamplingParams(max_tokens=4000, ignore_eos=True), request_id=gone, arrival_time=0
            )
            backend.abort(gone)
        for index in range(256):
            backend.submit(
                list(range(1, 40)),
                SamplingParams(max_tokens=8, ignore_eos=True),
                request_id=f"r{index}",
                arrival_time=backend.clock(),
            )
        backend.submit(
            list(range(1, 40)),
            SamplingParams(max_tokens=4000, ignore_eos=True),
            request_id="long",
            arrival_time=backend.clock(),
        )
        ended = {}
        while not all(f"r{index}" in ended for index in range(256)):
            ended.update({output.request_id: output for output in backend.advance().outputs if output.finished})
        assert server_state(url).num_running == 1  # the long one, still going
        backend.abort("long")
        while backend.has_unfinished():
            ended.update({output.request_id: output for output in backend.advance().outputs if output.finished})
    finally:
        backend.close()
        process.terminate()
        process.wait(timeout=30)
    assert all(
        ended[f"r{index}"].finish_reason == "length" and len(ended[f"r{index}"].token_ids) == 8 for index in range(256)
    )
    assert ended["long"].finish_reason == "abort" and 0 < len(ended["long"].token_ids) < 4000
    assert all(ended[f"gone{index}"].finish_reason == "abort" for index in range(20))


def test_1500_streams_are_in_flight_at_the_server_at_once(tokenizer):
    """No cap on this side: every stream reaches the server (httpx's pool stopped at 1,024), and
    closing the backend ends them all there."""
    port = free_port()
    process = start_workbench_server(
        port, "--set", "engine.model=simulated:llama-3-8b@h100-80gb", "--set", "engine.max_num_seqs=256"
    )
    url = f"http://127.0.0.1:{port}"
    try:
        backend = RemoteBackend(url, tokenizer)
        try:
            for index in range(1500):
                backend.submit(
                    list(range(1, 40)),
                    SamplingParams(max_tokens=1000, ignore_eos=True),
                    request_id=f"r{index}",
                    arrival_time=backend.clock(),
                )
            wait_until(
                lambda: (lambda now: now.num_running + now.num_waiting)(server_state(url)) == 1500,
                "1,500 requests at the server",
                60,
            )
        finally:
            backend.close()
        wait_until(
            lambda: server_state(url).num_running == 0 and server_state(url).num_waiting == 0,
            "the server to drop the closed streams",
        )
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_run_against_a_server_is_explained_as_far_as_it_can_be_and_replays_on_a_simulated_gpu(
    server, tmp_path, capsys
):
    from workbench.cli import main

    recorded = tmp_path / "recorded"
    scenario = load_preset("chat-steady", ["traffic.num_requests=4", "traffic.rate=8", "traffic.output_len.high=16"])
    backend = RemoteBackend(server, read_tokenizer("smollm2-135m"))
    try:
        run_headless(scenario, recorded, backend=backend)
    finally:
        backend.close()
    assert main(["explain", str(recorded)]) == 0
    printed = capsys.readouterr().out
    assert "at the server before the first token" in printed and "Not attributable: a server's run" in printed
    # A term on what the server does not expose is refused before anything is sent.
    refused = tmp_path / "refused"
    assert main(["replay", str(recorded), "--intended", "prefill_tok_s:+10%", "--out", str(refused)]) == 2
    assert "batch_composition capability, which the original run's backend" in capsys.readouterr().err
    replayed = tmp_path / "replayed"
    code = main(["replay", str(recorded), "--backend", "simulated:llama-2-7b@h100-80gb", "--out", str(replayed)])
    assert code == 0 and read_run_log(replayed / "run.jsonl").header["backend"]["name"] == "in-process engine"
    assert len(read_run_log(replayed / "run.jsonl").requests) == 4


def test_a_sweep_runs_every_point_against_the_server(server, tmp_path, capsys):
    from workbench.analysis.sweep import read_sweep
    from workbench.cli import main

    code = main(
        ["sweep", "--preset", "chat-steady", "--server", server, "--set", "traffic.num_requests=4"]
        + ["--set", "traffic.output_len.high=16", "--rates", "4,16", "--no-plots", "--out", str(tmp_path)]
    )
    sweep = read_sweep(tmp_path)
    assert code == 0 and [row["traffic.rate"] for row in sweep.rows] == ["4", "16"]
    assert all(row["complete"] and row["requests_finished"] == 4 for row in sweep.rows)
    header = read_run_log(tmp_path / "point-01" / "run.jsonl").header
    assert header["backend"]["name"] != "in-process engine"
