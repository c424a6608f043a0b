"""Single-stream decode per quantization option, against its roofline:

    python -m benchmarks.decode [--model smollm2-135m] [--tokens 128] [--context 16,1024,...]
        [--no-compile] [--only 'LABEL;LABEL'] [--csv FILE]

Rows (benchmarks.common.variants): the default configuration (quantization "auto", decode
compiled in the background; measured once the switch is made), then none, int8, int4, w8a8, int4
with the LM head quantized to int8 ("+ int8 head") and w8a8 with a W8A8 head, each eager and with
the decode step compiled before the run (EngineConfig.compile_decode; the first compile takes minutes). The peer,
llama.cpp (llama-cpp-python, 2 threads, the same GGUF file and prompt; `make peers`), is measured
in counterbalanced pairs with each row (`--pairs`, default 5, at least 3: this machine's speed
drifts by a third within an hour; benchmarks/paired_ratio.py), and every row gives the ratio with
its 95% interval and n, and whether the interval lies wholly above 1.0x ("met"), below it
("missed") or holds it ("undecided").

`--context`: the decode rate after prompts of these lengths (16: sixteen copies of token 1, as
before; longer: seeded random token ids), one row per option and length: how each engine's step
grows with the context it attends to. `--csv` writes the rows to a file as well.

Roofline: one decode step reads every weight once (the embedding table only a row of it, unless
it is also the LM head) and the K/V of its context (a sliding-window layer's window), so
tokens/s <= bandwidth / bytes read per token. The
achieved fraction shows how much of a step is spent elsewhere. Per-step Python overhead is
measured as step time minus kernel time, the kernel time being the torch profiler's self time of
every aten operator over 20 profiled steps (the profiler slows the Python side, not the kernels).
Compiled rows leave that split out: the profiler does not see the generated fused kernels.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

from benchmarks.common import (
    build_engine,
    chosen_variants,
    fixed_workload,
    machine_line,
    measure_this_machine,
    read_model,
    row_label,
)
from benchmarks.paired_ratio import MIN_PAIRS, measure_pairs, paired_ratio
from benchmarks.peers import llama_cpp_decode
from engine import LLMEngine, SamplingParams
from engine.core import EngineCore
from engine.quantization import QuantizedLinear
from engine.quantization.int8 import Int8Embedding


def kernel_ms_per_step(engine: LLMEngine, steps: int = 20) -> float:
    core = EngineCore(engine)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(steps):
            core.step_or_raise()
    return sum(event.self_cpu_time_total for event in profiler.key_averages()) / steps / 1000


def bytes_read_per_token(engine: LLMEngine) -> int:
    """Weight bytes one decode step reads: every stored weight, less the embedding table when the
    LM head is a tensor of its own (quantized, or untied), as the embedding then reads one row,
    and less the batched bf16 copies (a single row takes the packed kernels)."""
    model = engine.executor.model
    copies = sum(
        module.batched_weight.nbytes
        for module in model.modules()
        if isinstance(module, QuantizedLinear) and module.batched_weight is not None
    )
    table = model.model.embed_tokens
    if model.quantized_head is None and model.config.tie_word_embeddings:
        return engine.weight_bytes - copies
    if isinstance(table, Int8Embedding):
        return engine.weight_bytes - copies - table.qweight.nbytes - table.scales.nbytes
    return engine.weight_bytes - copies - table.weight.nbytes


def kv_bytes_read(engine: LLMEngine, context: int) -> int:
    """K and V one decode step reads at this context: every layer's whole context, a sliding-window
    layer's window only."""
    config = engine.model_config
    return 2 * config.num_kv_heads * config.head_dim * engine.kv_dtype.itemsize * config.attended_positions(context)


PROMPT = [1] * 16


def prompt_of(length: int, vocab_size: int) -> list[int]:
    return PROMPT if length == len(PROMPT) else fixed_workload(1, length, vocab_size)[0]


def decode_step_s(engine: LLMEngine, params: SamplingParams, prompt: list[int] = PROMPT) -> float:
    """Seconds per decode step of one request, timed from the first step after its prefill."""
    core = EngineCore(engine)
    engine.add_request(prompt, params)
    core.step_or_raise()  # prefill
    start, steps = time.perf_counter(), 0
    while engine.has_unfinished():
        core.step_or_raise()
        steps += 1
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="smollm2-135m", help="a bundled alias or a GGUF file (llama.cpp reads it too)"
    )
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument(
        "--context", default=str(len(PROMPT)), help="comma-separated prompt lengths to decode after (default 16)"
    )
    parser.add_argument("--csv", type=Path, help="also write the rows to this CSV file")
    parser.add_argument(
        "--no-compile", action="store_true", help="skip the rows with the decode step compiled (minutes to compile)"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=5,
        help=f"counterbalanced llama.cpp / this engine pairs per row (at least {MIN_PAIRS})",
    )
    parser.add_argument(
        "--only", help="semicolon-separated row labels to run, e.g. 'default;w8a8 + w8a8 head, compiled' (default: all)"
    )
    args = parser.parse_args()
    if args.pairs < MIN_PAIRS:
        parser.error(f"--pairs: at least {MIN_PAIRS} (a ratio's interval needs them), got {args.pairs}")
    source = read_model(args.model)
    contexts = [int(length) for length in args.context.split(",")]
    bandwidth = measure_this_machine().bandwidth_bytes_s
    print(f"machine: {machine_line()}; copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    peer = llama_cpp_decode(source.path, PROMPT, args.tokens)
    print(
        f"llama.cpp {peer['version']} (llama-cpp-python, 2 threads), measured in {args.pairs} counterbalanced pairs "
        "with each row: tok/s are medians, 'x llama.cpp' the pairs' geometric mean with its 95% interval"
        if peer
        else "llama.cpp: not measured (its venv is not built: make peers)"
    )
    print(
        f"{'option':<28} {'context':>8} {'tok/s':>7} {'llama.cpp':>10} {'x llama.cpp [95%], n':>31} {'vs 1.0x':>9} "
        f"{'step ms':>8} "
        f"{'kernel ms':>10} {'python ms':>10} {'weights MB':>11} {'read MB':>8} {'roofline tok/s':>15} {'achieved':>9}"
    )
    # K/V for the longest context in float32 (the widest cache dtype), with room to spare.
    kv_bytes = source.config.kv_bytes_per_token(4) * (max(contexts) + args.tokens + 64)
    rows = []
    for label, overrides in chosen_variants(not args.no_compile, args.only):
        engine = build_engine(source, overrides, model=args.model, kv_cache_memory=max(64 << 20, kv_bytes))
        params = SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True)
        engine.generate([PROMPT], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
        for context in contexts:
            prompt = prompt_of(context, source.config.vocab_size)

            def ours() -> float:
                return 1 / decode_step_s(engine, params, prompt)

            def peer_rate_now() -> float:
                return llama_cpp_decode(source.path, prompt, args.tokens)["decode_tok_s"]

            if peer:
                rates, peer_rates = measure_pairs(ours, peer_rate_now, args.pairs)
                versus = paired_ratio(rates, peer_rates)
            else:
                rates, peer_rates, versus = [ours() for _ in range(args.pairs)], None, None
            step_s = 1 / statistics.median(rates)
            kernel_ms = None
            if engine.executor.decode_mode != "compiled":
                engine.add_request(prompt, SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True))
                core = EngineCore(engine)
                core.step_or_raise()
                kernel_ms = kernel_ms_per_step(engine)
                while engine.has_unfinished():  # finish the profiled request
                    core.step_or_raise()
            read = bytes_read_per_token(engine) + kv_bytes_read(engine, context)
            row = {
                "option": row_label(label, overrides, engine),
                "context": context,
                "tok_s": 1 / step_s,
                "llama_cpp_tok_s": statistics.median(peer_rates) if peer_rates else None,
                "ratio": versus.ratio if versus else None,
                "ratio_low": versus.low if versus else None,
                "ratio_high": versus.high if versus else None,
                "vs_1x": versus.against(1.0) if versus else None,
                "step_ms": step_s * 1000,
                "kernel_ms": kernel_ms,
                "weights_mb": engine.weight_bytes / 1e6,
                "read_mb": read / 1e6,
                "roofline_tok_s": bandwidth / read,
                "pairs": args.pairs,
            }
            rows.append(row)
            print(format_row(row))
    if args.csv:
        with args.csv.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def format_row(row: dict) -> str:
    versus = (
        f"{row['llama_cpp_tok_s']:>10.1f} "
        + f"{row['ratio']:.2f}x [{row['ratio_low']:.2f}, {row['ratio_high']:.2f}], n = {row['pairs']}".rjust(31)
        + f" {row['vs_1x']:>9}"
        if row["ratio"] is not None
        else "-".rjust(10) + "-".rjust(32) + "-".rjust(10)
    )
    split = (
        f"{row['kernel_ms']:>10.2f} {row['step_ms'] - row['kernel_ms']:>10.2f}"
        if row["kernel_ms"] is not None
        else "-".rjust(10) * 2
    )
    achieved = 100 * row["tok_s"] / row["roofline_tok_s"]
    return (
        f"{row['option']:<28} {row['context']:>8} {row['tok_s']:>7.1f} {versus} {row['step_ms']:>8.2f} {split} "
        f"{row['weights_mb']:>11.1f} {row['read_mb']:>8.1f} {row['roofline_tok_s']:>15.1f} {achieved:>8.0f}%"
    )


if __name__ == "__main__":
    main()
