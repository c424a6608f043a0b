"""The CLI's smaller commands, checked for their values, not only their exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.configuration.config import EngineConfig
from workbench.backends.loader import BackendLoader
from workbench.cli import main
from workbench.traffic.presets import load_preset, preset_names


def test_estimate_prints_the_worked_number(capsys):
    assert main(["estimate", "--params", "7e9", "--bits", "16"]) == 0
    assert (
        capsys.readouterr().out.strip()
        == "weights: 7.0 × 10⁹ params × 2 bytes = 14.0 GB (before KV cache and runtime overhead)"
    )
    assert main(["estimate", "--params", "7e9", "--bits", "4"]) == 0
    assert "= 3.5 GB" in capsys.readouterr().out


def test_estimate_for_a_catalogued_model_and_gpu(capsys):
    assert (
        main(["estimate", "--model", "llama-2-7b", "--hardware", "h100-80gb", "--bits", "16", "--context", "4096"]) == 0
    )
    printed = capsys.readouterr().out
    assert "weights              13.48 GB" in printed and "KV cache             62.25 GB" in printed
    assert printed.strip().endswith("=> 28 concurrent 4,096-token requests fit")


def test_estimate_without_hardware_prints_what_needs_no_device(capsys):
    """Issue 15: it printed the parameter count only."""
    assert main(["estimate", "--model", "llama-2-7b", "--bits", "16", "--concurrent", "8"]) == 0
    printed = capsys.readouterr().out
    assert "weights              13.48 GB" in printed
    assert "KV per token           512 KiB  512 KiB/token (2 × 32 layers × 32 kv heads × 128 dims × 2 B)" in printed
    assert "512 KiB × 4,096 tokens = 2.147 GB" in printed  # the model's maximum context
    assert "weights + 8 × 2.147 GB = 30.66 GB" in printed
    assert main(["estimate", "--model", "llama-2-7b", "--bits", "16", "--kv-bits", "8", "--context", "1024"]) == 0
    printed = capsys.readouterr().out  # 8 bits: int8 codes and a float16 scale a row (kernels/quantized_kv.py)
    assert "260 KiB/token (2 × 32 layers × 32 kv heads × (128 dims × 1 B + 2 B scale))" in printed
    assert "260 KiB × 1,024 tokens = 0.273 GB" in printed


def test_estimate_keeps_only_the_window_in_sliding_window_layers(capsys):
    """Gemma 3 270M: 3 global layers keep every token, 15 local ones their 512-token window."""
    assert main(["estimate", "--model", "gemma3-270m", "--context", "32768"]) == 0
    printed = capsys.readouterr().out
    per_request = (
        "1 KiB/layer/token × (3 full-attention layers × 32,768 tokens + 15 sliding-window layers × 512 tokens) "
        "= 0.109 GB"
    )
    assert f"KV per request        0.11 GB   {per_request}" in printed
    assert main(["estimate", "--model", "gemma3-270m", "--context", "32768", "--hardware", "a100-80gb"]) == 0
    printed = capsys.readouterr().out
    assert f"{per_request} per request" in printed
    assert printed.strip().endswith("=> 692 concurrent 32,768-token requests fit")  # 75.16 GB / 0.109 GB


def test_presets_lists_every_preset_with_its_variants(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == preset_names()
    for line, name in zip(lines, preset_names()):
        variants = load_preset(name).variants
        assert (f"[variants: {', '.join(variants)}]" in line) == bool(variants)


@pytest.mark.slow
def test_quality_of_the_unquantized_model_against_itself(tmp_path, capsys):
    out = tmp_path / "quality.json"
    assert main(["quality", "--quant", "none", "--tokens", "32", "--json", str(out)]) == 0
    result = json.loads(out.read_text())["results"][0]
    assert result["option"] == "none" and result["evaluated_tokens"] == 31  # 32 tokens predict 31 next ones
    assert (result["perplexity_change_perc"], result["kl_divergence_mean_nats"], result["top1_agreement_perc"]) == (
        0.0,
        0.0,
        100.0,
    )
    assert 1.0 < result["perplexity"] < 50.0 and result["weight_bytes"] == result["unquantized_weight_bytes"]
    printed = capsys.readouterr().out
    assert "none" in printed and "+0.00" in printed


@pytest.mark.slow
def test_the_memory_estimate_matches_the_loaded_engine_byte_for_byte(capsys):
    assert main(["estimate", "--params", "135e6", "--loaded"]) == 0
    loaded = capsys.readouterr().out.splitlines()[-1]
    assert loaded.count("(+0.00%)") == 2, loaded  # weights, and the KV cache with its scratch block


@pytest.mark.slow
def test_quality_of_the_default_configuration_names_what_auto_chose(tmp_path):
    out = tmp_path / "quality.json"
    assert main(["quality", "--quant", "auto", "--tokens", "32", "--json", str(out)]) == 0
    reference, default = json.loads(out.read_text())["results"]
    assert (
        reference["option"] == "none"
        and default["option"] == "auto = int4 g32 + int8 head, bf16 copy from 8 rows, KV bfloat16"
    )
    assert default["quantization"] == "auto" and default["kl_divergence_mean_nats"] > 0.0
    # The quality ledger has them now, and the window's engine info quotes them for the same configuration.
    _, info = BackendLoader().load(EngineConfig(), lambda stage, fraction: None)
    assert info.quality.startswith(f"vs the file's own weights: perplexity {default['perplexity_change_perc']:+.2f}%")
    assert f"top-1 agreement {default['top1_agreement_perc']:.2f}% (n = 31 tokens" in info.quality


DECISION_WITHOUT_ARMS = (
    'name = "d"\n[traffic]\nrate = 1.0\nnum_requests = 2\n[decision]\nintended = ["output_tok_s:+1%"]\n'
)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["estimate", "--params=-7e9"], "argument --params: expected more than 0, got -7e9"),
        (["estimate", "--params", "7e9", "--bits", "3"], "argument --bits: invalid choice: 3"),
        (
            ["estimate", "--model", "llama-2-7b", "--hardware", "h100-80gb", "--context", "0"],
            "argument --context: expected at least 1, got 0",
        ),
        (["estimate", "--params", "1e9", "--kv-bits", "4"], "argument --kv-bits: invalid choice: 4"),
        (
            ["estimate", "--model", "llama-2-7b", "--hardware", "h100-80gb", "--max-num-batched-tokens", "-1"],
            "expected at least 1, got -1",
        ),
        (["quality", "--tokens", "-5"], "argument --tokens: expected at least 2, got -5"),
        (
            ["quality", "--quant", "int4", "--group-size", "0"],
            "--group-size: int4 takes group sizes 32, 64, 128, got 0",
        ),
        (["quality", "--json", "/no/such/folder/q.json"], "--json /no/such/folder/q.json: the folder /no/such/folder"),
        (
            ["bench", "--preset", "chat-steady", "--seed", "-5", "--out", "OUT"],
            "argument --seed: expected at least 0, got -5",
        ),
        (
            ["bench", "--preset", "chat-steady", "--set", "seed=-1", "--out", "OUT"],
            "chat-steady.toml: seed: expected an integer >= 0, got -1",
        ),
        (
            ["bench", "--preset", "chat-steady", "--set", "trace=everything", "--out", "OUT"],
            "trace: expected one of auto, full, summary, got 'everything'",
        ),
        (["trace", "OUT"], "no run log here"),
        (["trace", "OUT", "--step", "-1"], "argument --step: expected at least 0, got -1"),
        (["bench", "--preset", "DECISION", "--out", "OUT"], "missing key 'decision.baseline', 'decision.candidate'"),
        (
            [
                "bench",
                "--preset",
                "chat-steady",
                "--set",
                "engine.model=simulated:llama-2-7b@h100-80gb",
                "--set",
                "engine.max_num_seqs=1000000",
                "--out",
                "OUT",
            ],
            "one step's activations",
        ),
        (
            [
                "bench",
                "--preset",
                "chat-steady",
                "--set",
                "engine.model=simulated:llama-2-7b@h100-80gb",
                "--out",
                "/dev/null/x",
            ],
            "/dev/null/x: Not a directory",
        ),
        (["compile", "--set", "traffic.rate=2"], "--set: compile takes engine.KEY=VALUE settings only, got traffic"),
        (["compile", "--model", "no/such/model.gguf"], "no/such/model.gguf"),
        (["compare", "EMPTY", "EMPTY"], "not a workbench report (missing scenario, seed, complete, metrics)"),
        (["gui", "--run-for", "-5"], "argument --run-for: expected more than 0, got -5"),
        (["gui", "--screenshot", "OUT.png"], "--screenshot needs --run-for SECONDS"),
        (
            ["gui", "--run-for", "1", "--screenshot", "/nonexistent-folder/window.png"],
            "the folder /nonexistent-folder does not exist",
        ),
        (["gui", "--run-for", "1", "--screenshot", "OUT.jpg"], "expected a .png file"),
        (["gui", "--inspect", "3"], "--inspect needs --run-for SECONDS"),
        (["gui", "--baseline", "no/such/run"], "--baseline no/such/run: expected a run folder holding run.jsonl"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_code_2(arguments, message, tmp_path, capsys):
    (tmp_path / "decision.toml").write_text(DECISION_WITHOUT_ARMS)
    (tmp_path / "empty.json").write_text("{}")
    places = {
        "OUT": str(tmp_path / "out"),
        "OUT.png": str(tmp_path / "window.png"),
        "OUT.jpg": str(tmp_path / "window.jpg"),
        "DECISION": str(tmp_path / "decision.toml"),
        "EMPTY": str(tmp_path / "empty.json"),
    }
    arguments = [places.get(argument, argument) for argument in arguments]
    try:
        code = main(arguments)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    error = capsys.readouterr().err
    assert code == 2 and message in error and "Traceback" not in error


def test_a_bench_whose_every_step_fails_exits_1_and_says_where_the_error_is(tmp_path, monkeypatch, capsys):
    """Issue 77 #13: every request ended with the engine's error, and bench exited 0."""

    def failing(self, batch):
        raise RuntimeError("planted")

    monkeypatch.setattr("engine.simulation.executor.SimulatedExecutor.execute", failing)
    arguments = ["bench", "--preset", "chat-steady", "--set", "engine.model=simulated:llama-2-7b@h100-80gb"]
    code = main([*arguments, "--set", "traffic.num_requests=5", "--out", str(tmp_path), "--no-plots"])
    metrics = json.loads((tmp_path / "report.json").read_text())["metrics"]
    assert code == 1 and metrics["requests_failed"]["value"] == metrics["requests_failed"]["n"] == 5
    assert f"workbench: every request of chat-steady failed (the engine's error is in {tmp_path})" in (
        capsys.readouterr().err
    )


def test_a_billion_request_bench_starts_at_once_and_counts_what_it_never_sent(tmp_path, capsys):
    """Issue 19 #6: `--set traffic.num_requests=1000000000` hung at "requests: 0req" while it drew
    the whole plan. Now the run starts, stops at max_duration_s, and the report counts the rest."""
    code = main(
        [
            "bench",
            "--preset",
            "chat-steady",
            "--set",
            "engine.model=simulated:llama-2-7b@h100-80gb",
            "--set",
            "traffic.num_requests=1000000000",
            "--set",
            "max_duration_s=5",
            "--out",
            str(tmp_path),
        ]
    )
    report = json.loads((tmp_path / "report.json").read_text())
    metrics = report["metrics"]
    sent = metrics["requests_finished"]["n"]
    assert code == 0 and report["requests_planned"] == 10**9 and 0 < sent < 100
    assert metrics["requests_not_sent"]["value"] == 10**9 - sent
    assert f"planned requests never sent: {10**9 - sent}" in report["incomplete_because"]


def test_estimate_on_this_machine_says_where_it_saved_the_measurement(tmp_path, monkeypatch, capsys):
    """Issue 19: the first `--hardware this-machine` measured and wrote a cache file silently."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    arguments = ["estimate", "--model", "llama-2-7b", "--hardware", "this-machine", "--bits", "4"]
    assert main(arguments) == 0
    saved = tmp_path / "hardware.toml"
    assert f"measured this machine and saved the profile to {saved}" in capsys.readouterr().out
    assert '["this-machine"]' in saved.read_text()  # a quoted key: any name reads back as itself
    assert main(arguments) == 0
    assert "measured this machine" not in capsys.readouterr().out  # read back, not measured again


def test_a_reader_that_stops_reading_ends_the_command_quietly():
    """`workbench presets | head` printed "workbench: Broken pipe" (or Python's "Exception ignored"
    at exit) and failed; a real pipe whose reader is gone before anything is written."""
    command = [sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())", "presets"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader is gone: the command's first write meets a closed pipe
    errors = process.stderr.read()
    assert process.wait(timeout=120) == 0 and errors == ""


@pytest.mark.slow  # compiles the tiny model's decode graph
def test_compile_fills_the_cache_so_the_next_engine_is_compiled_at_once(tiny_llama, tmp_path, monkeypatch, capsys):
    """`make setup` runs it for the default configuration: the first window is then warm within a
    minute, not after minutes of eager steps beside the compiler."""
    import torch
    from torch._dynamo.utils import counters

    from engine import LLMEngine
    from engine.execution.compile_cache import INDUCTOR_CACHE_ENVIRONMENT

    # Empty caches, as on a machine's first run: the second engine can only find what compile left.
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(INDUCTOR_CACHE_ENVIRONMENT, str(tmp_path / "cache" / "torch-compile"))
    torch._dynamo.reset()
    directory, _ = tiny_llama
    settings = ["--model", str(directory), "--set", "engine.kv_cache_memory=4194304"]
    assert main(["compile", *settings]) == 0
    assert capsys.readouterr().out.startswith("workbench compile: decode compiled, prefill compiled halves after ")
    torch._dynamo.reset()  # what a new process has: only the caches on disk
    counters.clear()
    config = EngineConfig(model=str(directory), kv_cache_memory=4 << 20, compile_decode="blocking")
    with LLMEngine(config) as engine:
        assert (engine.executor.decode_mode, engine.executor.prefill_mode) == ("compiled", "compiled halves")
    assert counters["inductor"]["fxgraph_cache_hit"] >= 1 and counters["inductor"]["fxgraph_cache_miss"] == 0
