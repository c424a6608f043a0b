"""The soak: many simulated requests with random aborts, headless, and not one lost.

    python -m benchmarks.soak [--requests 10000] [--abort-probability 0.05] [--seed 0]

Poisson traffic (60 req/s, lognormal prompt and output lengths) on simulated:llama-2-7b@h100-80gb,
the engine's real scheduler and block manager; after each step, with the given probability, one
request sent so far is aborted (waiting, running, or already finished: every kind). Prints what
ended how, the wall time, and exits 1 if any request was lost or ended twice, or a block is
still in use at the end. The test suite runs the same function on fewer requests.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import numpy as np

from engine import EngineConfig, LLMEngine
from workbench.backends.local import LocalBackend
from workbench.runs.runner import ScenarioRunner
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import Scenario


def soak(num_requests: int, abort_probability: float, seed: int = 0) -> dict:
    config = EngineConfig(
        model="simulated:llama-2-7b@h100-80gb", max_num_seqs=256, max_num_batched_tokens=4096, seed=seed
    )
    engine = LLMEngine(config)
    traffic = TrafficProfile(
        arrival="poisson",
        rate=60.0,
        num_requests=num_requests,
        prompt_len=LengthDistribution(kind="lognormal", mean=200, std=0.8, high=3000),
        output_len=LengthDistribution(kind="lognormal", mean=150, std=0.8, high=1000),
    )
    rng = np.random.default_rng(seed)
    sent: list[str] = []
    abort_attempts = 0

    def maybe_abort(step) -> None:
        nonlocal abort_attempts
        if sent and rng.random() < abort_probability:
            abort_attempts += 1
            recent = sent[-512:]  # mostly requests in flight, some already finished
            engine.abort(recent[int(rng.integers(len(recent)))])

    runner = ScenarioRunner(
        LocalBackend(engine),
        Scenario(name="soak", engine=config, traffic=traffic, seed=seed),
        on_send=lambda request_id, prompt: sent.append(request_id),
        on_step=maybe_abort,
    )
    started = time.perf_counter()
    result = runner.run()
    wall_s = time.perf_counter() - started
    ended = Counter(request.request_id for request in result.requests)
    return {
        "requests": num_requests,
        "sent": len(sent),
        "ended": sum(ended.values()),
        "lost": len(set(sent) - set(ended)),
        "ended_twice": sum(1 for count in ended.values() if count > 1),
        "finish_reasons": dict(Counter(request.metrics.finish_reason for request in result.requests)),
        "abort_attempts": abort_attempts,
        "blocks_in_use_at_end": engine.block_manager.num_used_blocks,
        "steps": len(result.steps),
        "simulated_s": result.duration_s,
        "wall_s": wall_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--abort-probability", type=float, default=0.05, help="per step, the chance of one abort")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    outcome = soak(arguments.requests, arguments.abort_probability, arguments.seed)
    for name, value in outcome.items():
        print(f"{name:<22} {value:,.2f}" if isinstance(value, float) else f"{name:<22} {value}")
    failed = (
        outcome["lost"]
        or outcome["ended_twice"]
        or outcome["blocks_in_use_at_end"]
        or outcome["sent"] != outcome["requests"]
    )
    print(
        "FAIL: requests lost or blocks leaked" if failed else "ok: every request ended exactly once, every block free"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
