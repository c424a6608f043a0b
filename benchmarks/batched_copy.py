"""The batched bf16 copy against the packed kernels on the CPU in hand, in pairs:

    python -m benchmarks.batched_copy [--model smollm2-135m] [--requests 32] [--prompt-len 128]
        [--output-len 32] [--pairs 3]

First the timing "auto" decides by (engine/quantization/cpu_products.py: one gate projection at
64 rows, both ways), then the whole engine: the bundled file's int4 g32 + int8 head with the copy
kept, eager (so that no compile is timed), the copy switched off and on between runs in
counterbalanced pairs (benchmarks/paired_ratio.py). Each run is `--requests` seeded random prompts
arriving at once, ignore_eos; it prints tokens/s (prompt + output) both ways and with / without
the copy with its 95% interval and n.

To see a CPU without native bf16 on one that has it, hold oneDNN and ATen to AVX2:
`ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python -m benchmarks.batched_copy`.
"""

from __future__ import annotations

import argparse
import random
import time

from benchmarks.common import machine_line
from benchmarks.paired_ratio import MIN_PAIRS, measure_pairs, paired_ratio
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.quantization.base import QuantizedLinear
from engine.quantization.cpu_products import cpu_features, time_batched_copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=3, help=f"at least {MIN_PAIRS}")
    args = parser.parse_args()

    engine = LLMEngine(
        EngineConfig(
            model=args.model,
            quantization="int4",
            group_size=32,
            quantize_lm_head=True,
            batched_bf16_copy=True,
            compile_decode="off",
            enable_prefix_caching=False,
            max_num_seqs=args.requests,
        )
    )
    config = engine.model_config
    timing = time_batched_copy("int4", 32, config.hidden_size, config.intermediate_size)
    print(f"{machine_line()}; {cpu_features()}")
    print(
        f"layer timing (what auto decides by): packed {timing.packed_seconds * 1e3:.2f} ms, bf16 copy "
        f"{timing.bf16_seconds * 1e3:.2f} ms: {timing.describe()}; auto {'keeps' if timing.pays else 'drops'} the copy"
    )
    layers = [module for module in engine.executor.model.modules() if isinstance(module, QuantizedLinear)]
    copies = [layer.batched_weight for layer in layers]
    params = SamplingParams(max_tokens=args.output_len, temperature=0.0, ignore_eos=True)
    token_ids = random.Random(0)

    def run(with_copy: bool) -> float:
        for layer, copy in zip(layers, copies):
            layer.batched_weight = copy if with_copy else None
        prompts = [[token_ids.randrange(100, 20_000) for _ in range(args.prompt_len)] for _ in range(args.requests)]
        started = time.perf_counter()
        engine.generate(prompts, params)
        return args.requests * (args.prompt_len + args.output_len) / (time.perf_counter() - started)

    run(True)  # the allocator's first pass, in neither side's figures
    with_copy, without = measure_pairs(lambda: run(True), lambda: run(False), args.pairs)
    print(
        f"{args.requests} requests x ({args.prompt_len} + {args.output_len}) tokens, eager: "
        f"with the copy {', '.join(f'{rate:.0f}' for rate in with_copy)} tok/s; "
        f"packed only {', '.join(f'{rate:.0f}' for rate in without)} tok/s; "
        f"with / without {paired_ratio(with_copy, without).text()}"
    )
    engine.close()


if __name__ == "__main__":
    main()
