"""Single-stream decode per quantization option, against its roofline:

    python -m bench.decode [--tokens 128]

Roofline: one decode step reads every weight once, so tokens/s <= bandwidth / weight bytes. The
achieved fraction shows how much of a step is spent elsewhere (Python, attention, small ops).
Per-step host overhead is estimated as step time minus the weight-read time at the measured
bandwidth.
"""

from __future__ import annotations

import argparse
import time

from bench.common import OPTIONS, machine_line, measure_this_machine, read_model
from engine import EngineConfig, LLMEngine, SamplingParams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    source = read_model("smollm2-135m")
    bandwidth = measure_this_machine().bandwidth_bytes_s
    print(f"machine: {machine_line()}; copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    print(f"{'option':<8} {'tok/s':>7} {'step ms':>8} {'weights MB':>11} {'roofline tok/s':>15} {'achieved':>9} {'host ms/step':>13}")
    for option in OPTIONS:
        engine = LLMEngine(EngineConfig(quantization=option, kv_cache_memory=64 << 20), source=source)
        params = SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True)
        engine.generate([[1] * 16], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
        engine.add_request([1] * 16, params)
        engine.step()  # prefill
        start, steps = time.perf_counter(), 0
        while engine.has_unfinished():
            engine.step()
            steps += 1
        step_s = (time.perf_counter() - start) / steps
        roofline = bandwidth / engine.weight_bytes
        host_ms = 1000 * (step_s - engine.weight_bytes / bandwidth)
        print(f"{option:<8} {1 / step_s:>7.1f} {step_s * 1000:>8.2f} {engine.weight_bytes / 1e6:>11.1f} {roofline:>15.1f} "
              f"{100 / step_s / roofline:>8.0f}% {host_ms:>13.2f}")


if __name__ == "__main__":
    main()
