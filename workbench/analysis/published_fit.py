"""Fitting the serving stacks' parts to published runs, and the leave-one-source-out check of
that fit (issue 78): `workbench calibrate --published --refit` and the table in docs/memory.md.

Only parts no source gives (`Part.fitted`) are fitted, each over a grid inside the bounds its
source sets; the GPUs' efficiencies only when asked (`fit_hardware`)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from engine.simulation.serving_stacks import Part, ServingStack, serving_stack
from workbench.analysis.published import Corpus, FigureError, PublishedRun, errors_of, loss_of
from workbench.analysis.stated_error import METRIC_KINDS

# The values a fit tries for the GPUs' efficiencies and link latency (shared by every stack:
# hardware is hardware), within what such kernels reach: a decode's weight stream at 70-90% of the
# datasheet's bandwidth, paged K/V gathers at 50-90%, products at 50-80% of peak.
HARDWARE_GRIDS = {
    "bandwidth_efficiency": [0.7, 0.75, 0.8, 0.85, 0.9],
    "kv_bandwidth_efficiency": [0.5, 0.6, 0.7, 0.8, 0.9],
    "compute_efficiency": [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8],
    "link_latency_s": [2e-6, 5e-6, 1e-5, 1.5e-5, 2e-5, 3e-5],
}
POINTS_PER_PART = 5


def part_grid(part: Part) -> list[float]:
    """The values a fit tries for a part: POINTS_PER_PART spaced evenly in log between the bounds its
    source sets (from a hundredth of the high bound where the low one is 0, and 0 itself)."""
    low, high = part.bounds
    start = low or high / 100
    grid = [start * (high / start) ** (index / (POINTS_PER_PART - 1)) for index in range(POINTS_PER_PART)]
    return ([0.0] if low == 0 else []) + grid


def prior(stack: ServingStack) -> ServingStack:
    """The stack as its sources alone give it: each fitted part at the middle (in log) of its bounds,
    what is known of it before any published run of the stack is seen."""
    return stack.with_values(
        **{name: part_grid(part)[len(part_grid(part)) // 2] for name, part in stack.parts().items() if part.fitted}
    )


@dataclass
class Fit:
    hardware: dict[str, float]
    stacks: dict[str, ServingStack]
    loss: float


def fit(
    corpus: Corpus,
    runs: list[PublishedRun] | None = None,
    stacks: dict[str, ServingStack] | None = None,
    fit_hardware: bool = False,
    on_step: Callable[[str], None] = lambda line: None,
) -> Fit:
    """The stacks' fitted parts (and with `fit_hardware`, the GPUs' efficiencies and link latency)
    that minimise `loss_of` over `runs` (by default the fitting runs, never the held-out ones): a
    coordinate search, one value at a time over its grid inside its source's bounds, each stack's
    then the hardware's, twice round. Parts a source gives, and what a stack overlaps, stay."""
    runs = runs if runs is not None else [run for run in corpus.runs if not corpus.held_out(run)]
    names = sorted({run.stack for run in runs})
    start = stacks or {name: serving_stack(name) for name in names}
    current = Fit({}, {name: start[name] for name in names}, math.inf)

    def rows_by_run(subset, stacks, hardware) -> dict[str, list[FigureError]]:
        grouped: dict[str, list[FigureError]] = {run.id: [] for run in subset}
        for row in errors_of(corpus, subset, stacks, hardware):
            grouped[row.run.id].append(row)
        return grouped

    def total(grouped) -> float:
        return loss_of([row for group in grouped.values() for row in group])

    rows = rows_by_run(runs, current.stacks, current.hardware)
    current.loss = total(rows)
    on_step(f"start: loss {current.loss:.4f} over {sum(map(len, rows.values()))} figures of {len(runs)} runs")
    for round_number in range(1, 3):
        for stack_name in names:
            stack_runs = [run for run in runs if run.stack == stack_name]
            for name, part in current.stacks[stack_name].parts().items():
                if not part.fitted:
                    continue
                for value in part_grid(part):
                    changed = current.stacks[stack_name].with_values(**{name: value})
                    stacks = {**current.stacks, stack_name: changed}
                    trial_rows = {**rows, **rows_by_run(stack_runs, stacks, current.hardware)}
                    if (loss := total(trial_rows)) < current.loss:
                        current.stacks, current.loss, rows = stacks, loss, trial_rows
                on_step(
                    f"round {round_number}: {stack_name} {name} = "
                    f"{getattr(current.stacks[stack_name], name).value:g}, loss {current.loss:.4f}"
                )
        if not fit_hardware:
            continue
        for name, grid in HARDWARE_GRIDS.items():
            for value in grid:
                trial = {**current.hardware, name: value}
                trial_rows = rows_by_run(runs, current.stacks, trial)
                if (loss := total(trial_rows)) < current.loss:
                    current.hardware, current.loss, rows = trial, loss, trial_rows
            on_step(
                f"round {round_number}: {name} = {current.hardware.get(name, 'catalogued')}, loss {current.loss:.4f}"
            )
    return current


def leave_one_source_out(corpus: Corpus, on_step: Callable[[str], None] = lambda line: None) -> list[FigureError]:
    """For each source: every stack's fitted parts fitted afresh to the other sources' runs (from
    their priors; a stack no other source ran keeps its prior), then that source's runs simulated
    with them. Each row's `held_out` is true: no figure of it was seen by its fit. The GPUs'
    efficiencies stay as catalogued (fitted once to the whole corpus, issue 59)."""
    rows: list[FigureError] = []
    for source in sorted({run.source for run in corpus.runs}):
        tested = [run for run in corpus.runs if run.source == source]
        others = [run for run in corpus.runs if run.source != source and run.stack in {r.stack for r in tested}]
        stacks = {name: prior(serving_stack(name)) for name in {run.stack for run in tested}}
        if others:
            fitted = fit(
                corpus, others, stacks, on_step=lambda line, source=source: on_step(f"without {source}: {line}")
            )
            stacks.update(fitted.stacks)
        on_step(f"without {source}: testing {len(tested)} runs")
        rows += [dataclasses.replace(row, held_out=True) for row in errors_of(corpus, tested, stacks)]
    return rows


def format_loso_table(rows: list[FigureError]) -> str:
    """docs/memory.md's leave-one-source-out table: per source and kind of figure, n, median and
    worst |error|, then per kind over every source."""
    lines = ["| source left out | figures | n | median abs. error | worst |", "|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        for source in (row.run.source, "every source"):
            groups.setdefault((source, METRIC_KINDS[row.metric]), []).append(abs(row.error_perc))
    for (source, kind), errors in sorted(groups.items(), key=lambda item: (item[0][0] == "every source", item[0])):
        lines.append(f"| {source} | {kind} | {len(errors)} | {statistics.median(errors):.1f}% | {max(errors):.1f}% |")
    return "\n".join(lines)
