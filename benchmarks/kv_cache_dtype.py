"""An 8-bit KV cache (int8, or fp8_e4m3) against a bfloat16 one, the rest of the engine as
configured by default:

    python -m benchmarks.kv_cache_dtype [--kv-cache-dtype int8] [--model smollm2-135m] [--pairs 3]
        [--requests 64] [--long-context 8192]

Both engines compile their decode step before the first run, then run in counterbalanced pairs
(benchmarks/paired_ratio.py): N requests x (128 prompt + 128 output) tokens at t=0, ignore_eos,
output tokens/s; and one request of --long-context prompt tokens generating 64 (its TPOT p50:
where the cache's bytes are most of what a decode step reads). Prints each run, the 8-bit / bf16
ratios with their 95% interval, and each cache's capacity in the same memory.
"""

from __future__ import annotations

import argparse

from benchmarks.common import build_engine, machine_line, read_model
from benchmarks.fixed_workload import fixed_workload, run_fixed_workload
from benchmarks.paired_ratio import MIN_PAIRS, measure_pairs, paired_ratio

KV_MEMORY = 2 << 30  # both caches the same bytes; a long context fits either


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kv-cache-dtype", choices=("int8", "fp8_e4m3"), default="int8", help="the 8-bit cache")
    parser.add_argument("--model", default="smollm2-135m", help="a bundled model (BUNDLED_MODELS)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument(
        "--long-context",
        type=int,
        default=8064,
        help="prompt tokens of the single long request (+ 64 output: within SmolLM2's 8,192)",
    )
    parser.add_argument("--pairs", type=int, default=MIN_PAIRS)
    args = parser.parse_args()
    eight_bit = args.kv_cache_dtype
    source = read_model(args.model)
    engines = {
        kv: build_engine(
            source,
            {"kv_cache_dtype": kv, "compile_decode": "blocking"},
            max_num_seqs=args.requests,
            max_num_batched_tokens=2048,
            kv_cache_memory=KV_MEMORY,
        )
        for kv in (eight_bit, "bfloat16")
    }
    vocab = source.config.vocab_size
    batch = fixed_workload(args.requests, 128, vocab, seed=1)
    long_prompt = fixed_workload(1, args.long_context, vocab, seed=2)

    def run(kv: str) -> tuple[float, float]:
        engine = engines[kv]
        throughput = run_fixed_workload(engine, batch, 128)["output_tok_s"]
        tpot = run_fixed_workload(engine, long_prompt, 64)["tpot"].p50
        print(
            f"KV {kv}: {throughput:.1f} output tok/s at {args.requests}; TPOT p50 {tpot:.1f} ms at "
            f"{args.long_context:,} tokens",
            flush=True,
        )
        return throughput, tpot

    eight_bit_runs, bf16_runs = measure_pairs(lambda: run(eight_bit), lambda: run("bfloat16"), args.pairs)
    print(f"machine: {machine_line()}")
    print(f"model: {args.model} ({source.path.name}); {engines[eight_bit].quantization}")
    for kv, engine in engines.items():
        print(
            f"KV {kv}: {engine.kv_bytes_per_token:,} bytes/token, {engine.kv_capacity_tokens:,} tokens in "
            f"{KV_MEMORY / 2**30:.0f} GiB"
        )
    throughput = paired_ratio([run[0] for run in eight_bit_runs], [run[0] for run in bf16_runs])
    # Time per token: bf16's over the 8-bit cache's is the 8-bit cache's speed over bf16's.
    long_speed = paired_ratio([run[1] for run in bf16_runs], [run[1] for run in eight_bit_runs])
    print(f"{eight_bit} / bf16 output tok/s, {args.requests} x (128 + 128): {throughput.text()}")
    print(
        f"{eight_bit} / bf16 decode speed (1 / TPOT p50), one request at {args.long_context:,} tokens: "
        f"{long_speed.text()}"
    )
    for engine in engines.values():
        engine.close()


if __name__ == "__main__":
    main()
