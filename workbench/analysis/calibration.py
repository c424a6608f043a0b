"""Fit the cost model to this machine: time the real executor over a grid of decode batches,
contexts and prefill lengths, fit the efficiencies and per-step overhead on half the points,
and report the prediction error on the other half."""

from __future__ import annotations

import itertools
import math
import statistics
import time
from dataclasses import replace

import numpy as np

from engine.batch import ScheduledBatch, ScheduledSequence, slot_mappings
from engine.llm_engine import LLMEngine
from engine.memory import weight_bytes_estimate
from engine.quantization import weight_format
from engine.sampling_params import SamplingParams
from engine.simulation import KV_BYTES_PER_VALUE
from engine.simulation.catalogue import HardwareProfile
from engine.simulation.cost_model import CostModel, StepShape

GREEDY = SamplingParams(temperature=0.0)


def _batch(engine: LLMEngine, decodes: int, context: int, prefill: int) -> ScheduledBatch:
    """A synthetic batch over the cache's blocks (no request needs to be in the engine)."""
    size, groups = engine.config.block_size, len(engine.kv_layout.groups)
    blocks_per_seq = -(-max(context, prefill) // size)
    entries_decode, entries_prefill = [], []
    # Every KV group reads and writes the same blocks: only the step's time is measured.
    for index in range(decodes):
        tables = [[(index * blocks_per_seq + block) % engine.num_kv_blocks for block in range(blocks_per_seq)]] * groups
        slots = slot_mappings(tables, context - 1, 1, size)
        entries_decode.append(ScheduledSequence(f"d{index}", [1], context - 1, tables, slots, True, GREEDY, 0))
    if prefill:
        tables = [list(range(-(-prefill // size)))] * groups
        slots = slot_mappings(tables, 0, prefill, size)
        entries_prefill.append(ScheduledSequence("p", [1] * prefill, 0, tables, slots, True, GREEDY, 0))
    return ScheduledBatch(decodes=entries_decode, prefills=entries_prefill, block_size=size)


def measure(engine: LLMEngine, repeats: int = 3) -> list[tuple[StepShape, float]]:
    points = []
    grid = [(batch, context, 0) for batch, context in itertools.product((1, 4, 16, 32), (64, 256, 1024))]
    grid += [(0, 0, prefill) for prefill in (16, 64, 128, 256, 512)]
    for decodes, context, prefill in grid:
        batch = _batch(engine, decodes, context, prefill)
        engine.executor.execute(batch)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            engine.executor.execute(batch)
            times.append(time.perf_counter() - start)
        points.append((StepShape.of(batch), statistics.median(times)))
    return points


def fit(
    engine: LLMEngine, base: HardwareProfile, points: list[tuple[StepShape, float]]
) -> tuple[HardwareProfile, float, float]:
    """Grid search on the even points for the least mean |log(predicted / measured)|; returns
    (profile, median |error| on them, on the odd points) in %.
    The cost model is built as a simulated engine of this model and quantization builds it (its
    weight bytes estimated from the shape, K/V at 16 bits), so the profile fits the simulator as
    it will run, not the real engine's own byte counts (a bf16 copy beside int4 weights, say)."""
    train, held_out = points[0::2], points[1::2]
    weights = weight_bytes_estimate(
        engine.model_config, *weight_format(engine.config.quantization, engine.config.group_size)
    )
    kv_bytes_per_token = engine.model_config.kv_bytes_per_token(KV_BYTES_PER_VALUE)

    def ratios(profile: HardwareProfile, subset) -> list[float]:
        """Predicted over measured, per point."""
        model = CostModel(engine.model_config, profile, weights, kv_bytes_per_token)
        return [model.step_time(shape) / measured for shape, measured in subset]

    def errors(profile: HardwareProfile, subset) -> list[float]:
        return [abs(ratio - 1) for ratio in ratios(profile, subset)]

    best, best_error = base, float("inf")
    fastest = min(measured for _, measured in points)
    efficiencies = np.geomspace(0.01, 1, 12)
    grid = itertools.product(
        efficiencies, efficiencies, efficiencies, np.linspace(0, 0.8 * fastest, 5), (0.0, 1e-4, 3e-4, 1e-3, 2e-3)
    )
    for bandwidth_eff, kv_eff, compute_eff, overhead, per_sequence in grid:
        candidate = replace(
            base,
            bandwidth_efficiency=float(bandwidth_eff),
            kv_bandwidth_efficiency=float(kv_eff),
            compute_efficiency=float(compute_eff),
            step_overhead_s=float(overhead),
            sequence_overhead_s=float(per_sequence),
        )
        # Every point counts: a median would let the decode points, most of the grid, leave the
        # prefill points (the compute term) unfitted, as it once did: 2.7x too slow a prefill.
        error = statistics.fmean(abs(math.log(ratio)) for ratio in ratios(candidate, train))
        if error < best_error:
            best, best_error = candidate, error
    return best, 100 * statistics.median(errors(best, train)), 100 * statistics.median(errors(best, held_out))
