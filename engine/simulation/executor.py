"""`SimulatedExecutor`: the engine's executor interface with a cost model instead of a model.

The scheduler, block manager, admission control, preemption and metrics are the engine's own,
unchanged; only the forward pass is replaced: each step advances a simulated clock by the cost
model's step time and returns placeholder token ids (use ignore_eos: they mean nothing).

Speculative decoding by a draft model (speculative_method = "draft") is simulated by its two
effects: the draft model's steps cost `cost_fraction` of a plain decode step of the speculating
sequences each, one per proposed position; and the target agrees with each proposal with the
probability `acceptance_rate` given it agreed with those before (the i.i.d. acceptance of
Leviathan et al. 2023, whose expected tokens per step is (1 - a^(k+1)) / (1 - a)). The verify step
itself is the cost model's: k + 1 new tokens per speculating row.
"""

from __future__ import annotations

import random
import time

from engine.scheduling.batch import ScheduledBatch
from engine.scheduling.speculation import DraftProposer
from engine.simulation.cost_model import CostModel, StepShape

PLACEHOLDER_TOKEN = 0
# What the target "samples" where it disagrees with a proposal (any token but the proposal's).
DISAGREEING_TOKEN = DraftProposer.PLACEHOLDER_TOKEN + 1


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


class DraftModel:
    """The simulated draft model's two settings, and the seeded draws of what the target accepts."""

    def __init__(self, acceptance_rate: float, cost_fraction: float, seed: int):
        self.acceptance_rate, self.cost_fraction = acceptance_rate, cost_fraction
        self._random = random.Random(seed)

    def accepted(self, proposed: int) -> int:
        """How many of `proposed` tokens the target agrees with, in order."""
        count = 0
        while count < proposed and self._random.random() < self.acceptance_rate:
            count += 1
        return count

    def drafting_time(self, cost_model: CostModel, batch: ScheduledBatch) -> float:
        """The draft model's steps: one per proposed position, each a plain decode of the
        speculating sequences at `cost_fraction` of the target's time."""
        speculating = [entry for entry in batch.decodes if entry.num_proposed]
        if not speculating:
            return 0.0
        plain = StepShape(tuple((1, entry.start_position + 1, True) for entry in speculating))
        steps = max(entry.num_proposed for entry in speculating)
        return self.cost_fraction * steps * cost_model.gpu_time(plain)


class SimulatedExecutor:
    def __init__(
        self,
        cost_model: CostModel,
        clock: SimulatedClock,
        kv_cache_bytes: int,
        draft_model: DraftModel | None = None,
    ):
        self.cost_model, self.clock, self.draft_model = cost_model, clock, draft_model
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
        seconds = self.cost_model.step_time(StepShape.of(batch))
        if self.draft_model is not None:
            seconds += self.draft_model.drafting_time(self.cost_model, batch)
        self.clock.advance(seconds)
        tokens = []
        for entry in batch.sequences:
            if entry.num_proposed:  # the agreed proposals, then a disagreement (or the bonus token)
                accepted = self.draft_model.accepted(entry.num_proposed)
                tokens += entry.proposed[:accepted] + [DISAGREEING_TOKEN] * (entry.num_proposed + 1 - accepted)
            elif entry.samples:
                tokens.append(PLACEHOLDER_TOKEN)
        return tokens
