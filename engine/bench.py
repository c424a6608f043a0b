"""Throughput benchmark: N requests arriving together, fixed prompt and output lengths (ignore_eos).

    python -m engine.bench [--num-requests 64] [--prompt-len 128] [--output-len 128] [--dtype float32]

Prompts are seeded random token ids: with ignore_eos the content does not change the work done.
Prints output tokens/s, request throughput and TTFT / TPOT percentiles with their n.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from engine import EngineConfig, LLMEngine, SamplingParams, percentiles
from engine.device import device_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=1024)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    engine = LLMEngine(
        EngineConfig(
            model=args.model, device=args.device, dtype=args.dtype, max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens, seed=args.seed,
        )
    )
    generator = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, engine.model_config.vocab_size, (args.num_requests, args.prompt_len), generator=generator).tolist()
    params = SamplingParams(max_tokens=args.output_len, temperature=0.0, ignore_eos=True)

    start = time.perf_counter()
    outputs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - start

    output_tokens = sum(len(output.token_ids) for output in outputs)
    print(f"machine: {platform.processor() or platform.machine()}, {device_name(engine.device)}, torch {torch.__version__}, dtype {engine.dtype}")
    print(f"workload: {args.num_requests} requests x ({args.prompt_len} prompt + {args.output_len} output) tokens, all at t=0")
    print(f"elapsed: {elapsed:.2f} s")
    print(f"output throughput: {output_tokens / elapsed:.1f} tok/s ({output_tokens} tokens)")
    print(f"request throughput: {len(outputs) / elapsed:.2f} req/s (n={len(outputs)})")
    print(f"TTFT ms: {percentiles(output.metrics.ttft_ms for output in outputs)}")
    print(f"TPOT ms/token: {percentiles(output.metrics.tpot_ms for output in outputs)}")


if __name__ == "__main__":
    main()
