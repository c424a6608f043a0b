"""Issue 78's settings away from the published runs, on the simulated Llama 3 8B on one H100:
ShareGPT lengths (the 320 vLLM's benchmark sampled) at a Poisson rate, each stack as a user
leaves it, and vLLM 0.6.0 as its published runs ran it (multi-step 10, whole prefills, 256
sequences, 4,096 tokens a step). Prints the mean and median TPOT (n = requests of more than one
token), the median TTFT, the output rate and the load the run's steps show. The simulator is
deterministic: one run each.

    python -m benchmarks.stack_defaults [--requests 400]
"""

from __future__ import annotations

import argparse

from workbench.analysis.published import PublishedRun, simulate

VLLM_060_PUBLISHED = {
    "enable_chunked_prefill": False,
    "num_scheduler_steps": 10,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 4096,
}
CASES = [
    ("the defaults (auto: vllm-0.8)", "vllm-0.8", 2.0, {}),
    ("vllm-0.6.0 at its own defaults (one scheduler step)", "vllm-0.6.0", 2.0, {"enable_chunked_prefill": False}),
    ("vllm-0.6.0 as published (multi-step 10)", "vllm-0.6.0", 2.0, VLLM_060_PUBLISHED),
    ("vllm-0.6.0 as published (multi-step 10)", "vllm-0.6.0", 32.0, VLLM_060_PUBLISHED),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    for label, stack, rate, engine in CASES:
        run = PublishedRun(
            id="stack-defaults",
            source="benchmark",
            stack=stack,
            model="llama-3-8b",
            hardware="h100-80gb",
            requests="sharegpt",
            num_requests=args.requests,
            rate=rate,
            figures={"tpot_p50_ms": 1.0},
            engine={"max_model_len": 4096, **engine},
        )
        figures = simulate(run)
        print(
            f"{label}, {rate:g} req/s: mean TPOT {figures['tpot_mean_ms']:.2f} ms (median "
            f"{figures['tpot_p50_ms']:.2f} ms, n = {figures['tpot_n']} requests), median TTFT "
            f"{figures['ttft_p50_ms']:.1f} ms, {figures['output_tok_s']:,.0f} output tok/s, {figures['load']} load"
        )


if __name__ == "__main__":
    main()
