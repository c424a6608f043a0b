"""What a simulated figure is worth where the run stands (issue 78): the published figures of
presets/published/errors.toml in the run's region (its serving stack, one GPU or tensor
parallel, multi-step scheduling or not, chunked prefill or not, and its load), their median
|error| per kind of figure, or where none is near, that no published run checks these settings.
The window's plots and Memory tab, reports, sweeps' charts, `explain` and decisions quote it."""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import statistics
import tomllib
from dataclasses import dataclass
from pathlib import Path

from engine import EngineConfig
from engine.requests.metrics import StepStats

# Figures of one kind: a per-token latency is TPOT or ITL, as the published run gave it.
METRIC_KINDS = {
    "output_tok_s": "throughput",
    "ttft_p50_ms": "TTFT",
    "tpot_p50_ms": "per-token latency",
    "itl_p50_ms": "per-token latency",
}
FIGURE_KINDS = tuple(dict.fromkeys(METRIC_KINDS.values()))
ERRORS_FILE = Path(str(importlib.resources.files("presets"))) / "published" / "errors.toml"

# A run's load, from its steps (those with a sequence): "light" while they hold a few sequences
# on average; "saturated" where on average at least one request waits for admission for every
# two that run (the queue grows faster than the batch drains it: a burst past the server's
# slots, an arrival rate past its capacity), or the batch is nearly full; "busy" between.
LOADS = ("light", "busy", "saturated")
LIGHT_SEQUENCES = 4
WAITING_PER_RUNNING = 0.5
FULL_BATCH = 0.9


def load_of(steps: list[StepStats], max_num_seqs: int) -> str:
    """The load of a run whose steps are `steps`."""
    working = [step for step in steps if step.num_seqs]
    if not working:
        return "light"
    waiting = statistics.fmean(step.num_waiting + step.num_waiting_long for step in working)
    running = statistics.fmean(step.num_running for step in working)
    if waiting >= WAITING_PER_RUNNING * running or running >= FULL_BATCH * max_num_seqs:
        return "saturated"
    return "light" if running <= LIGHT_SEQUENCES else "busy"


@dataclass(frozen=True)
class Region:
    """Where a simulated run stands for the error of its figures: its stack, one GPU or tensor
    parallel, multi-step scheduling or not, chunked prefill or not, and its load (None before the
    run has run: any). A figure's stated error comes from published figures in the same region."""

    stack: str
    tensor_parallel: bool
    multi_step: bool
    chunked_prefill: bool
    load: str | None = None

    def __post_init__(self) -> None:
        if self.load not in (None, *LOADS):
            raise ValueError(f"load: expected one of {LOADS} or None, got {self.load!r}")

    @classmethod
    def of(cls, engine: EngineConfig | dict, load: str | None = None) -> Region:
        """The region of a run of `engine` (a config, or a report's `engine` table) at `load`."""
        values = dataclasses.asdict(engine) if isinstance(engine, EngineConfig) else engine
        defaults = EngineConfig()
        return cls(
            values["serving_stack"],
            values.get("tensor_parallel_size", 1) > 1,
            values.get("num_scheduler_steps", defaults.num_scheduler_steps) > 1,
            bool(values.get("enable_chunked_prefill", defaults.enable_chunked_prefill)),
            load,
        )

    def words(self) -> str:
        """In words: "one GPU, single-step, chunked prefill, light load"."""
        return ", ".join(
            (
                "tensor parallel" if self.tensor_parallel else "one GPU",
                "multi-step" if self.multi_step else "single-step",
                "chunked prefill" if self.chunked_prefill else "whole prefills",
                f"{self.load} load" if self.load else "any load",
            )
        )

    def holds(self, figure: dict) -> bool:
        """Whether a figure of presets/published/errors.toml stands in this region."""
        return (
            figure["stack"] == self.stack
            and figure["tensor_parallel"] == self.tensor_parallel
            and figure["multi_step"] == self.multi_step
            and figure["chunked_prefill"] == self.chunked_prefill
            and (self.load is None or figure["load"] == self.load)
        )


UNCHECKED = "no published run checks these settings"


@dataclass(frozen=True)
class StatedError:
    """What a simulated figure of one kind is worth where the run stands: the median |error| of
    that kind over the published figures in its region (`Region`: the stack, one GPU or tensor
    parallel, multi-step or not, chunked prefill or not, the load), from
    presets/published/errors.toml."""

    stack: str
    kind: str
    median_abs_perc: float | None  # None: no published figure of this kind in the region
    n: int
    held_out: int
    where: str = ""  # the region in words (Region.words); "" in reports written before regions

    def report_entry(self) -> dict:
        """As report.json's `simulated_error` holds it, per kind (read back by `from_report`)."""
        return {
            "median_abs_perc": self.median_abs_perc,
            "n": self.n,
            "held_out": self.held_out,
            "where": self.where,
            "says": self.phrase(),
        }

    @classmethod
    def from_report(cls, stack: str, kind: str, entry: dict) -> StatedError:
        return cls(stack, kind, entry["median_abs_perc"], entry["n"], entry["held_out"], entry.get("where", ""))

    @property
    def label(self) -> str:
        """The stack and region: "vllm-0.6.0; one GPU, multi-step, whole prefills, busy load"."""
        return f"{self.stack}; {self.where}" if self.where else self.stack

    def phrase(self) -> str:
        if self.median_abs_perc is None:
            return f"simulated ({self.label}): {self.kind}: {UNCHECKED}"
        return (
            f"simulated ({self.label}): ±{self.median_abs_perc:.0f}% median error against {self.n} published "
            f"{self.kind} figure{'s' if self.n > 1 else ''} ({self.held_out} held out)"
        )


def one_line(errors: list[StatedError]) -> tuple[str, str]:
    """One region's errors over the kinds of figure on one line, and its short form (a chart's
    title, the window's plots): "simulated (vllm-0.6.0; one GPU, ...): TTFT ±8%, per-token latency
    ±9%, throughput ±8% against published runs" and "simulated ±8-9%"; where no published figure
    is in the region, it says so instead of a ± figure."""
    label, checked = errors[0].label, [error.median_abs_perc for error in errors if error.median_abs_perc is not None]
    if not checked:
        return f"simulated ({label}): {UNCHECKED}", "simulated: unchecked here"
    parts = [
        f"{error.kind} " + ("unchecked" if error.median_abs_perc is None else f"±{error.median_abs_perc:.0f}%")
        for error in errors
    ]
    low, high = round(min(checked)), round(max(checked))
    return (
        f"simulated ({label}): {', '.join(parts)} against published runs",
        f"simulated ±{low}%" if low == high else f"simulated ±{low}-{high}%",
    )


@functools.lru_cache(maxsize=4)
def _published_figures(modified_ns: int) -> tuple[dict, ...]:
    """ERRORS_FILE's figures as of its modification time `modified_ns`: read once per version,
    not once per figure kind and per run (a sweep states the error of every point)."""
    try:
        return tuple(tomllib.loads(ERRORS_FILE.read_text()).get("figures", []))
    except (OSError, tomllib.TOMLDecodeError):
        return ()


def stated_error(region: Region, kind: str) -> StatedError:
    """The error on figures of `kind` (one of FIGURE_KINDS) in `region`."""
    try:
        figures = _published_figures(ERRORS_FILE.stat().st_mtime_ns)
    except OSError:
        figures = ()
    near = [figure for figure in figures if METRIC_KINDS[figure["metric"]] == kind and region.holds(figure)]
    if not near:
        return StatedError(region.stack, kind, None, 0, 0, region.words())
    return StatedError(
        region.stack,
        kind,
        statistics.median(abs(figure["error_perc"]) for figure in near),
        len(near),
        sum(1 for figure in near if figure["held_out"]),
        region.words(),
    )


def kind_of(metric: str) -> str:
    """A report metric's kind of figure: TTFT; per-token latency for TPOT, ITL and e2e (a
    request's end is mostly its decode); throughput for rates."""
    metric = metric.rpartition("/")[2]  # a tag's figures ("chat/ttft_p50_ms") are of the same kind
    if metric.startswith("ttft"):
        return "TTFT"
    if metric.startswith(("tpot", "itl", "e2e")):
        return "per-token latency"
    return "throughput"
