"""`SimulatedExecutor`: the engine's executor interface with a cost model instead of a model.

The scheduler, block manager, admission control, preemption and metrics are the engine's own,
unchanged; only the forward pass is replaced: each step advances a simulated clock by the cost
model's step time and returns placeholder token ids (use ignore_eos: they mean nothing).
"""

from __future__ import annotations

import time

from engine.scheduling.batch import ScheduledBatch
from engine.simulation.cost_model import CostModel, StepShape

PLACEHOLDER_TOKEN = 0


class SimulatedClock:
    """Engine time in seconds, advanced by the simulated executor (and by idle waits). With a
    `speed`, each advance also waits speed-scaled wall time (1.0 = real time, for the GUI);
    without, a run goes as fast as the host allows."""

    def __init__(self, speed: float = 0.0, start: float = 0.0):
        self.now, self.speed = start, speed

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.now += seconds
        if self.speed:
            time.sleep(seconds / self.speed)


class SimulatedExecutor:
    def __init__(self, cost_model: CostModel, clock: SimulatedClock, kv_cache_bytes: int):
        self.cost_model, self.clock = cost_model, clock
        self.kv_cache_bytes = kv_cache_bytes  # planned: nothing is allocated
        self.decode_mode = "simulated"  # as TorchExecutor.decode_mode: no model runs
        self.prefill_mode = "simulated"
        self.compile_progress = None  # nothing compiles
        self.last_step_compiled = False

    def warm_up(self) -> None:
        """Nothing to warm: no model runs."""

    def close(self) -> None:
        """Nothing runs in the background."""

    def execute(self, batch: ScheduledBatch) -> list[int]:
        self.clock.advance(self.cost_model.step_time(StepShape.of(batch)))
        return [PLACEHOLDER_TOKEN for entry in batch.sequences if entry.samples]
