"""Throughput benchmark: N requests arriving together, fixed prompt and output lengths (ignore_eos).

    python -m benchmarks.fixed_workload [--num-requests 64] [--prompt-len 128] [--output-len 128] [--dtype float32]

Prompts are seeded random token ids: with ignore_eos the content does not change the work done.
Prints output tokens/s, request throughput and TTFT / TPOT percentiles with their n.
(`python -m benchmarks.throughput` runs the same workload per quantization option against
transformers and the machine's ceilings.)
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from engine import EngineConfig, LLMEngine, SamplingParams, percentiles
from engine.platform.device import device_name


def fixed_workload(requests: int, prompt_len: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (requests, prompt_len), generator=generator).tolist()


def run_fixed_workload(engine: LLMEngine, prompts: list[list[int]], output_len: int) -> dict:
    """Generate every prompt to exactly output_len tokens; throughput and latency with their n."""
    engine.generate([prompts[0][:8]], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))  # warm-up
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    start = time.perf_counter()
    outputs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - start
    return {
        "elapsed_s": elapsed,
        "output_tok_s": sum(len(output.token_ids) for output in outputs) / elapsed,
        "request_s": len(outputs) / elapsed,
        "n": len(outputs),
        "ttft": percentiles(output.metrics.ttft_ms for output in outputs),
        "tpot": percentiles(output.metrics.tpot_ms for output in outputs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--quantization", default="auto")
    parser.add_argument(
        "--compile-decode",
        default="blocking",
        help="background, blocking or off (EngineConfig.compile_decode); "
        "blocking, so that every step of the measured run runs the same way",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    engine = LLMEngine(
        EngineConfig(
            model=args.model,
            device=args.device,
            dtype=args.dtype,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            quantization=args.quantization,
            seed=args.seed,
            compile_decode=args.compile_decode,
        )
    )
    prompts = fixed_workload(args.num_requests, args.prompt_len, engine.model_config.vocab_size, args.seed)
    result = run_fixed_workload(engine, prompts, args.output_len)
    print(
        f"machine: {platform.machine()}, {device_name(engine.device)}, torch {torch.__version__}, dtype {engine.dtype}"
    )
    print(
        f"workload: {args.num_requests} requests x ({args.prompt_len} prompt + {args.output_len} output) tokens, all "
        "at t=0"
    )
    print(f"elapsed: {result['elapsed_s']:.2f} s")
    print(f"output throughput: {result['output_tok_s']:.1f} tok/s")
    print(f"request throughput: {result['request_s']:.2f} req/s (n={result['n']})")
    print(f"TTFT ms: {result['ttft']}")
    print(f"TPOT ms/token: {result['tpot']}")


if __name__ == "__main__":
    main()
