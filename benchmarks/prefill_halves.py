"""Prefill through the compiled halves against the same engine's eager prefill, in pairs:

    python -m benchmarks.prefill_halves [--model smollm2-135m] [--prompt-lens 128,512,1024,2048,4096]
        [--pairs 5]

One engine, the default configuration with its graphs compiled before the run (decode graph and
prefill halves, engine/execution/compiled_prefill.py). Each run of a point is one prompt of that length
(seeded random token ids, new for every run, so nothing comes from the prefix cache) and one
output token: prefill tokens/s = prompt tokens / the time to the token. The halves are switched
off and on between runs, in counterbalanced pairs (compiled, eager, eager, compiled, ...;
benchmarks/paired_ratio.py); each length prints both rates and compiled / eager with its 95%
interval and n.
"""

from __future__ import annotations

import argparse
import random
import time

from benchmarks.paired_ratio import MIN_PAIRS, measure_pairs, paired_ratio
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.core import EngineCore
from engine.execution.compiled_prefill import CompiledHalves

ONE_TOKEN = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
SWITCHED_OFF = "eager (switched off by benchmarks.prefill_halves)"


def prefill_rate(engine: LLMEngine, prompt: list[int]) -> float:
    """Prompt tokens per second to the first token of one request."""
    core = EngineCore(engine)
    engine.add_request(prompt, ONE_TOKEN)
    started = time.perf_counter()
    while engine.has_unfinished():
        core.step_or_raise()
    return len(prompt) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompt-lens", default="128,512,1024,2048,4096")
    parser.add_argument("--pairs", type=int, default=5, help=f"at least {MIN_PAIRS}")
    args = parser.parse_args()
    lengths = [int(length) for length in args.prompt_lens.split(",")]

    engine = LLMEngine(EngineConfig(model=args.model, compile_decode="blocking", enable_prefix_caching=False))
    halves: CompiledHalves = engine.executor.prefill_halves
    if not halves.usable:
        raise SystemExit(f"the prefill halves did not compile: {engine.executor.prefill_mode}")
    print(f"{args.model}: {engine.quantization}, decode {engine.executor.decode_mode}; {args.pairs} pairs per length")
    token_ids = random.Random(0)

    def run(length: int, mode: str) -> float:
        halves.mode = mode
        return prefill_rate(engine, [token_ids.randrange(100, 20_000) for _ in range(length)])

    for length in lengths:
        run(length, "compiled")  # the allocator's first pass at this size, in neither side's figures
        compiled, eager = measure_pairs(lambda: run(length, "compiled"), lambda: run(length, SWITCHED_OFF), args.pairs)
        print(
            f"{length:>6} tokens: compiled {', '.join(f'{rate:.0f}' for rate in compiled)} tok/s; "
            f"eager {', '.join(f'{rate:.0f}' for rate in eager)} tok/s; "
            f"compiled / eager {paired_ratio(compiled, eager).text()}",
            flush=True,
        )
    halves.mode = "compiled"
    engine.close()


if __name__ == "__main__":
    main()
