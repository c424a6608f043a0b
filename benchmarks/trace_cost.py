"""What step tracing costs, on the fixed workload:

    python -m benchmarks.trace_cost [--rounds 3] [--requests 64] [--prompt-len 128] [--output-len 128]

The bundled SmolLM2 in its default configuration (decode compiled first). The machine drifts by
tens of percent between runs a minute apart, more than the cost measured, so tracing is switched
on and off on alternate steps of the same run: consecutive decode steps of a full batch do the
same work, and their durations compare step for step. Prints the median duration of traced and
untraced full-batch decode steps, with n, and their ratio (the throughput cost). Then the run-log
bytes per step of a full and a summary trace line (workbench/step_traces/log.py) and the time to
encode one, on average and at the busiest step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks.common import build_engine, fixed_workload, machine_line, read_model
from engine import SamplingParams
from engine.core import EngineCore
from engine.requests.step_trace import NoTrace
from workbench.step_traces.log import trace_record


def alternate_tracing(
    engine, prompts: list[list[int]], output_len: int
) -> tuple[list[float], list[float], list[tuple]]:
    """One run of the workload with tracing on for even steps, off for odd ones. Returns the
    durations of full-batch decode steps (traced, untraced), and per traced step: rows, bytes of
    the full line, bytes of the summary line, seconds to encode the full line."""
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    for prompt in prompts:
        engine.add_request(prompt, params)
    builder, no_trace, traced, untraced, sizes = engine.scheduler.trace, NoTrace(), [], [], []
    index, core = 0, EngineCore(engine)
    while engine.has_unfinished():
        engine.scheduler.trace = builder if index % 2 == 0 else no_trace
        result = core.step_or_raise()
        stats = result.stats
        if stats.prefill_tokens == 0 and stats.decode_tokens == len(prompts):
            (traced if result.trace is not None else untraced).append(stats.step_duration_s)
        if result.trace is not None:
            started = time.perf_counter()
            full = json.dumps(trace_record(result.trace, full=True))
            encoded_s = time.perf_counter() - started
            summary = json.dumps(trace_record(result.trace, full=False))
            sizes.append((len(result.trace.rows), len(full) + 1, len(summary) + 1, encoded_s))
        index += 1
    engine.scheduler.trace = builder
    return traced, untraced, sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="runs of the workload, pooled")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    args = parser.parse_args()
    source = read_model("smollm2-135m")
    prompts = fixed_workload(args.requests, args.prompt_len, source.config.vocab_size)
    engine = build_engine(
        source, {"step_trace": True}, max_num_seqs=args.requests, max_num_batched_tokens=2048, compile_decode="blocking"
    )
    assert engine.scheduler.trace.enabled
    print(
        f"{machine_line()}; {args.requests} x ({args.prompt_len} + {args.output_len}) tokens, ignore_eos; "
        f"default configuration: {engine.quantization}, decode {engine.executor.decode_mode}"
    )
    traced, untraced, sizes = [], [], []
    for _ in range(args.rounds):
        on, off, step_sizes = alternate_tracing(engine, prompts, args.output_len)
        traced += on
        untraced += off
        sizes += step_sizes
    on_ms, off_ms = 1000 * statistics.median(traced), 1000 * statistics.median(untraced)
    print(
        f"full-batch decode steps ({args.requests} rows): traced {on_ms:.1f} ms (median, n={len(traced)}), untraced "
        f"{off_ms:.1f} ms (n={len(untraced)}); traced/untraced throughput {off_ms / on_ms:.3f} "
        f"({100 * (off_ms / on_ms - 1):+.1f}%)"
    )
    busiest = max(sizes)
    print(
        f"trace lines over {len(sizes)} traced steps: full {statistics.mean(size[1] for size in sizes):,.0f} "
        "bytes/step on average, "
        f"{busiest[1]:,} at the busiest step ({busiest[0]} rows); summary "
        f"{statistics.mean(size[2] for size in sizes):,.0f} "
        f"bytes/step on average, {busiest[2]:,} at the busiest; encoding a full line "
        f"{1e6 * statistics.median(size[3] for size in sizes):.0f} "
        f"µs/step (median), {1e6 * busiest[3]:.0f} µs at the busiest"
    )


if __name__ == "__main__":
    main()
