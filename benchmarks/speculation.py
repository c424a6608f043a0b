"""n-gram speculative decoding against plain decoding, by concurrency, on a copying workload:

    python -m benchmarks.speculation [--model smollm2-135m] [--concurrency 1,4,16,64] [--pairs 3]
        [--speculative-tokens 3] [--schedule constant] [--prompt-lookup-min 2] [--output-len 128]

The workload is the `copying` prompt source's (workbench/traffic/prompts.py): ShareGPT replies
handed back with "repeat this text", greedy, ignore_eos, --output-len tokens each. At concurrency N,
N requests arrive together; at one stream, 4 requests run one after another, so that each run's
TPOT p50 has n = 4. Both engines compile their decode step first,
then run in counterbalanced pairs (benchmarks/paired_ratio.py), alone on the machine.

Prints each run (TPOT p50 with n, output tok/s, tokens per step, acceptance), then per N the
speedup of TPOT p50 (plain / speculating) and the ratio of output tok/s (speculating / plain),
each with its 95% interval: where the first crosses 1 is where speculation stops paying.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common import build_engine, machine_line, read_model
from benchmarks.paired_ratio import MIN_PAIRS, measure_pairs, paired_ratio
from engine import EngineConfig, LLMEngine, SamplingParams, percentiles
from workbench.traffic.prompts import PromptMaker


def copying_prompts(engine: LLMEngine, count: int, seed: int) -> list[list[int]]:
    maker = PromptMaker(engine.tokenizer, engine.model_config.vocab_size)
    rng = np.random.default_rng(seed)
    return [maker.copying(rng, 1024)[0] for _ in range(count)]


def run_once(engine: LLMEngine, prompts: list[list[int]], concurrency: int, output_len: int) -> dict:
    """The prompts in groups of `concurrency` that arrive together, one group after another."""
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    scheduler, steps_before = engine.scheduler, engine.num_steps
    proposed_before, accepted_before = scheduler.num_draft_tokens, scheduler.num_accepted_tokens
    start = time.perf_counter()
    outputs = [
        output
        for first in range(0, len(prompts), concurrency)
        for output in engine.generate(prompts[first : first + concurrency], params)
    ]
    elapsed = time.perf_counter() - start
    tokens = sum(len(output.token_ids) for output in outputs)
    proposed = scheduler.num_draft_tokens - proposed_before
    return {
        "tpot": percentiles(output.metrics.tpot_ms for output in outputs),
        "output_tok_s": tokens / elapsed,
        "tokens_per_step": tokens / (engine.num_steps - steps_before),
        "acceptance": (scheduler.num_accepted_tokens - accepted_before) / proposed if proposed else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a bundled model (BUNDLED_MODELS)")
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--speculative-tokens", type=int, default=EngineConfig.num_speculative_tokens)
    parser.add_argument(
        "--schedule",
        choices=("constant", "heuristic"),
        default=EngineConfig.num_speculative_tokens_schedule,
        help="num_speculative_tokens_schedule",
    )
    parser.add_argument(
        "--prompt-lookup-min",
        type=int,
        default=EngineConfig.prompt_lookup_min,
        help="the shortest suffix that may match",
    )
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=MIN_PAIRS)
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    source = read_model(args.model)
    speculation = {
        "speculative_method": "ngram",
        "num_speculative_tokens": args.speculative_tokens,
        "prompt_lookup_min": args.prompt_lookup_min,
        "num_speculative_tokens_schedule": args.schedule,
    }
    engines = {
        label: build_engine(
            source,
            {"compile_decode": "blocking", **overrides},
            max_num_seqs=max(levels),
            max_num_batched_tokens=2048,
        )
        for label, overrides in (("ngram", speculation), ("plain", {}))
    }
    prompts = copying_prompts(engines["plain"], max(max(levels), 4), seed=0)
    print(f"machine: {machine_line()}")
    print(f"model: {args.model} ({source.path.name}); {engines['plain'].quantization}")
    for level in levels:
        batch = prompts[: max(level, 4)]

        def run(label: str, level: int = level, batch: list[list[int]] = batch) -> dict:
            result = run_once(engines[label], batch, level, args.output_len)
            acceptance = f", acceptance {result['acceptance']:.2f}" if result["acceptance"] is not None else ""
            print(
                f"N={level} {label}: TPOT {result['tpot']}, {result['output_tok_s']:.1f} output tok/s, "
                f"{result['tokens_per_step']:.2f} tokens/step{acceptance}",
                flush=True,
            )
            return result

        speculating, plain = measure_pairs(lambda: run("ngram"), lambda: run("plain"), args.pairs)
        speedup = paired_ratio([run["tpot"].p50 for run in plain], [run["tpot"].p50 for run in speculating])
        throughput = paired_ratio([run["output_tok_s"] for run in speculating], [run["output_tok_s"] for run in plain])
        print(f"N={level}: TPOT p50 speedup (plain / ngram) {speedup.text()}")
        print(f"N={level}: output tok/s ngram / plain {throughput.text()}")
    for engine in engines.values():
        engine.close()


if __name__ == "__main__":
    main()
