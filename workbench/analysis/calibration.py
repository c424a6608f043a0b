"""Fit the cost model to this machine: time the real executor over a grid of decode batches,
contexts and prefill lengths, fit the efficiencies and per-step overhead on half the points,
and report the prediction error on the other half; then, from a real run's own steps (their
shapes from its step traces, their measured durations), the factor per batch-size bucket by
which whole engine steps differ from that fit (`HardwareProfile.decode_scale_by_rows`)."""

from __future__ import annotations

import itertools
import math
import statistics
import time
from dataclasses import replace

import numpy as np

from engine.configuration.memory import weight_bytes_estimate
from engine.llm_engine import LLMEngine
from engine.quantization import weight_format
from engine.requests.sampling_params import SamplingParams
from engine.scheduling.batch import ScheduledBatch, ScheduledSequence, slot_mappings
from engine.simulation.catalogue import HardwareProfile
from engine.simulation.cost_model import CostModel, StepShape
from workbench.runs.run_log import RunLog
from workbench.step_traces.log import read_trace

GREEDY = SamplingParams(temperature=0.0)
# The real runs whose steps give the step factors: (name, preset, --set settings). Light and
# heavy load of a preset none of the held-out workloads use (workbench/analysis/fidelity.py), so
# the batch sizes from 1 to 32 rows all occur.
STEP_FIT_RUNS = (
    ("chat-steady-2rps", "chat-steady", ()),
    ("chat-steady-6rps", "chat-steady", ("traffic.rate=6",)),
)


def _batch(engine: LLMEngine, decodes: int, context: int, prefill: int, prefill_from: int = 0) -> ScheduledBatch:
    """A synthetic batch over the cache's blocks (no request needs to be in the engine): `decodes`
    rows at `context`, and a prefill chunk of `prefill` tokens after `prefill_from` cached ones."""
    size, groups = engine.config.block_size, len(engine.kv_layout.groups)
    blocks_per_seq = -(-max(context, prefill) // size)
    entries_decode, entries_prefill = [], []
    # Every KV group reads and writes the same blocks: only the step's time is measured.
    for index in range(decodes):
        tables = [[(index * blocks_per_seq + block) % engine.num_kv_blocks for block in range(blocks_per_seq)]] * groups
        slots = slot_mappings(tables, context - 1, 1, size)
        entries_decode.append(ScheduledSequence(f"d{index}", [1], context - 1, tables, slots, True, GREEDY, 0))
    if prefill:
        tables = [list(range(-(-(prefill_from + prefill) // size)))] * groups
        slots = slot_mappings(tables, prefill_from, prefill, size)
        entries_prefill.append(ScheduledSequence("p", [1] * prefill, prefill_from, tables, slots, True, GREEDY, 0))
    return ScheduledBatch(decodes=entries_decode, prefills=entries_prefill, block_size=size)


def measure(engine: LLMEngine, repeats: int = 3) -> list[tuple[StepShape, float]]:
    points = []
    # Every batch-size bucket the step factors use (1, 2-3, 4-7, ...): this CPU's decode is not
    # linear in its rows, and without 2 and 8 the fit never saw where it bends. Contexts to 2,048
    # and prefill chunks after 1,024 and 2,048 cached tokens: without them the K/V and attention
    # terms were fitted on short contexts only, and a conversation's long-context steps ran 15%
    # (decode) to 44% (prefill) slower than the fit said.
    decode_grid = itertools.product((1, 2, 4, 8, 16, 32), (64, 256, 1024, 2048))
    grid = [(batch, context, 0, 0) for batch, context in decode_grid]
    grid += [(0, 0, prefill, 0) for prefill in (16, 64, 128, 256, 512)]
    grid += [(0, 0, 512, cached) for cached in (1024, 2048)]
    for decodes, context, prefill, cached in grid:
        batch = _batch(engine, decodes, context, prefill, cached)
        engine.executor.execute(batch)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            engine.executor.execute(batch)
            times.append(time.perf_counter() - start)
        points.append((StepShape.of(batch), statistics.median(times)))
    return points


def _cost_model(engine: LLMEngine, profile: HardwareProfile) -> CostModel:
    """The cost model of a simulated engine of this model and quantization on `profile`: its
    weight bytes estimated from the shape, K/V at 16 bits (see `fit`)."""
    weights = weight_bytes_estimate(
        engine.model_config, *weight_format(engine.config.quantization, engine.config.group_size)
    )
    return CostModel(engine.model_config, profile, weights, engine.kv_bytes_per_token)


def fit(
    engine: LLMEngine, base: HardwareProfile, points: list[tuple[StepShape, float]]
) -> tuple[HardwareProfile, float, float]:
    """Grid search on the even points for the least mean |log(predicted / measured)|; returns
    (profile, median |error| on them, on the odd points) in %.
    The cost model is built as a simulated engine of this model and quantization builds it (its
    weight bytes estimated from the shape, K/V at 16 bits), so the profile fits the simulator as
    it will run, not the real engine's own byte counts (a bf16 copy beside int4 weights, say)."""
    train, held_out = points[0::2], points[1::2]

    def ratios(profile: HardwareProfile, subset) -> list[float]:
        """Predicted over measured, per point."""
        model = _cost_model(engine, profile)
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


def real_steps(log: RunLog) -> list[tuple[StepShape, float]]:
    """Each step of a real run whose trace line lists every row: its shape and its duration.
    A row samples where it is a decode or the last chunk of its prompt."""
    points = []
    for step, record in zip(log.steps, log.traces):  # one trace line per step, in order
        if not record["full"]:
            continue
        trace = read_trace(record)
        sequences = tuple(
            (row.end - row.start, row.end, row.kind == "decode" or row.end >= row.num_prompt_tokens)
            for row in trace.rows
        )
        if sequences:
            starting = sum(1 for row in trace.rows if row.kind == "prefill" and row.start == 0)
            points.append((StepShape(sequences, starting), step["step_duration_s"]))
    return points


def fit_step_scales(
    engine: LLMEngine, profile: HardwareProfile, steps: list[tuple[StepShape, float]]
) -> HardwareProfile:
    """The profile with its measured step factors: per batch-size bucket, the median of measured
    over predicted among the decode-only steps of that size; for steps with a prefill, the median
    over all of them. A bucket no step fell in takes its nearest neighbour's factor below, else
    above (a batch larger than any run saw keeps the largest bucket's)."""
    model = _cost_model(engine, replace(profile, decode_scale_by_rows=(), prefill_step_scale=1.0))
    by_bucket: dict[int, list[float]] = {}
    with_prefill = []
    for shape, measured in steps:
        ratio = measured / model.step_time(shape)
        if shape.has_prefill:
            with_prefill.append(ratio)
        else:
            by_bucket.setdefault(len(shape.sequences).bit_length() - 1, []).append(ratio)
    if not by_bucket:
        return profile
    medians = {bucket: statistics.median(ratios) for bucket, ratios in by_bucket.items()}
    scales = []
    for bucket in range(max(medians) + 1):
        nearest = max((known for known in medians if known <= bucket), default=min(medians))
        scales.append(round(medians[nearest], 4))
    return replace(
        profile,
        decode_scale_by_rows=tuple(scales),
        prefill_step_scale=round(statistics.median(with_prefill), 4) if with_prefill else 1.0,
    )
