"""A sweep: one preset run at every combination of some settings and arrival rates, one row of
figures per point (sweep.csv), and the search for the highest arrival rate that meets the preset's
SLOs.

Every point's scenario is built (and so checked) before the first runs: a key that does not exist
or a value of the wrong type is refused with the key named, and nothing has run. Each point is a
run folder of its own (`point-01`, ...), so `workbench explain` and the window open any of them;
sweep.csv is rewritten after every point, so an interrupted sweep keeps the points it finished.

The highest rate (`find_max_rate`): a rate "meets" when the share of arrived requests meeting every
SLO (goodput_perc) is at least the target. From the preset's rate, the search doubles (or halves)
until one rate meets and another misses, then bisects geometrically until the bracket is within
the tolerance. Goodput is not monotonic in rate on a noisy machine; the bracket states the two
rates measured either side, each with its goodput and interval.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ConfigError
from workbench.analysis.stated_error import StatedError

SWEEP_CSV = "sweep.csv"
RATE_KEY = "traffic.rate"
# The figures of each point: value, and the 95% interval's ends where the report has one.
FIGURES = (
    "output_tok_s",
    "request_throughput_req_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "goodput_perc",
    "kv_usage_peak_perc",
    "preemptions",
    "requests_finished",
)
# Percentiles, goodput and output tok/s (its spread over time blocks) have an interval within a run.
_WITH_INTERVALS = {name for name in FIGURES if name.endswith("_ms")} | {"goodput_perc", "output_tok_s"}
_WITH_N = ("ttft_p99_ms", "goodput_perc")  # their n: requests finished, requests arrived


@dataclass(frozen=True)
class Vary:
    key: str  # a preset setting, TABLE.KEY as --set takes it
    values: tuple[str, ...]  # as typed (TOML syntax)


def parse_vary(text: str) -> Vary:
    """KEY=v1,v2,... (values in TOML syntax, as --set takes them)."""
    key, separator, values = text.partition("=")
    items = tuple(value.strip() for value in values.split(",")) if separator else ()
    if not key.strip() or not items or not all(items):
        raise ConfigError(f"--vary {text!r}: expected KEY=v1,v2,..., e.g. engine.max_num_seqs=8,16,32")
    return Vary(key.strip(), items)


@dataclass(frozen=True)
class SweepPoint:
    index: int  # from 1
    settings: dict[str, str]  # key -> value as typed, in the order varied

    @property
    def folder(self) -> str:
        return f"point-{self.index:02d}"

    def overrides(self) -> list[str]:
        return [f"{key}={value}" for key, value in self.settings.items()]

    def label(self) -> str:
        return describe_settings(self.settings)


def describe_settings(settings: dict) -> str:
    """e.g. "max_num_seqs=16, rate=4": each key without its table."""
    return ", ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in settings.items())


def plan_points(varies: list[Vary], rates: list[float]) -> list[SweepPoint]:
    """Every combination, the last setting varying fastest; the rates (if any) last. None when
    nothing varies."""
    keys = [vary.key for vary in varies]
    if len(set(keys)) < len(keys):
        raise ConfigError(
            f"--vary: each key once; {', '.join(sorted({k for k in keys if keys.count(k) > 1}))} repeated"
        )
    axes = [vary.values for vary in varies]
    if rates:
        if RATE_KEY in keys:
            raise ConfigError(f"--rates and --vary {RATE_KEY}: give the rates once")
        keys.append(RATE_KEY)
        axes.append(tuple(f"{rate:g}" for rate in rates))
    if not axes:
        return []
    return [
        SweepPoint(index, dict(zip(keys, combination)))
        for index, combination in enumerate(itertools.product(*axes), start=1)
    ]


def _figure_columns(name: str) -> dict[str, Callable[[dict], object]]:
    """A figure's columns in sweep.csv (its value, its interval's ends, its n), each with how to
    read it from the figure's report entry."""
    columns = {name: lambda entry: entry.get("value")}
    if name in _WITH_INTERVALS:
        columns[f"{name}_low"] = lambda entry: (entry.get("interval") or {}).get("low")
        columns[f"{name}_high"] = lambda entry: (entry.get("interval") or {}).get("high")
    if name in _WITH_N:
        columns[f"{name.rsplit('_', 1)[0]}_n"] = lambda entry: entry.get("n")
    return columns


def sweep_row(point: SweepPoint, report: dict) -> dict:
    """One row of sweep.csv: the point, its settings, whether its run was complete, its figures."""
    row = {"point": point.index, "folder": point.folder, **point.settings, "complete": report["complete"]}
    for name in FIGURES:
        entry = report["metrics"].get(name) or {}
        row.update({column: read(entry) for column, read in _figure_columns(name).items()})
    return row


def csv_columns(keys: list[str]) -> list[str]:
    return ["point", "folder", *keys, "complete", *(column for name in FIGURES for column in _figure_columns(name))]


def write_sweep_csv(path: Path, keys: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=csv_columns(keys))
        writer.writeheader()
        writer.writerows(rows)


@dataclass
class Sweep:
    """A sweep read back: its varied keys and one row per point (numbers as floats, None if empty);
    for a rate search, the goodput target it searched for (SEARCH_JSON)."""

    folder: Path
    keys: list[str]
    rows: list[dict] = field(default_factory=list)
    target_perc: float | None = None
    # Its points on simulated GPUs: per region (stack, settings, load: StatedError.label), what
    # each kind of figure is worth (the points' report.json, `simulated_error`); empty where every
    # point ran for real.
    simulated_errors: dict[str, list[StatedError]] = field(default_factory=dict)


SEARCH_JSON = "search.json"  # a --find-max-rate sweep's own settings, beside sweep.csv


def write_search_settings(folder: Path, target_perc: float, tolerance: float) -> None:
    (folder / SEARCH_JSON).write_text(json.dumps({"goodput_target_perc": target_perc, "tolerance": tolerance}))


def _read_target(folder: Path) -> float | None:
    """The goodput target a rate search used, or None for a sweep that searched nothing."""
    path = folder / SEARCH_JSON
    if not path.exists():
        return None
    try:
        target = json.loads(path.read_text())["goodput_target_perc"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f'{path}: expected {{"goodput_target_perc": a percentage, ...}} ({error})') from None
    if not isinstance(target, (int, float)) or not 0 < target <= 100:
        raise ConfigError(f"{path}: goodput_target_perc: expected a percentage in (0, 100], got {target!r}")
    return float(target)


def read_sweep(folder: Path) -> Sweep:
    """A sweep folder's sweep.csv; ConfigError naming the file for anything else."""
    path = folder / SWEEP_CSV if folder.is_dir() else folder
    if not path.exists():
        raise ConfigError(f"{path}: no sweep here (a sweep folder holds {SWEEP_CSV})")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        if "point" not in header or "complete" not in header:
            raise ConfigError(f"{path}: not a workbench sweep (expected the columns point, folder, ..., complete)")
        keys = header[header.index("folder") + 1 : header.index("complete")]
        rows = []
        for number, raw in enumerate(reader, start=2):
            row = dict(raw)
            for name in header[header.index("complete") + 1 :]:
                try:
                    row[name] = float(raw[name]) if raw[name] not in ("", None) else None
                except ValueError:
                    raise ConfigError(
                        f"{path}:{number}: column {name!r}: expected a number, got {raw[name]!r}"
                    ) from None
            row["complete"] = raw["complete"] == "True"
            rows.append(row)
    return Sweep(path.parent, keys, rows, _read_target(path.parent), _simulated_errors(path.parent, rows))


def _simulated_errors(folder: Path, rows: list[dict]) -> dict[str, list[StatedError]]:
    """Per region (serving stack and settings, load) of the points that ran on simulated GPUs, the
    errors their reports state.
    A point whose report.json is gone or unreadable says nothing (its figures are in sweep.csv)."""
    errors = {}
    for row in rows:
        try:
            report = json.loads((folder / row["folder"] / "report.json").read_text())
            stack, stated = report["engine"]["serving_stack"], report["simulated_error"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        stated_errors = [StatedError.from_report(stack, kind, entry) for kind, entry in stated.items()]
        errors.setdefault(stated_errors[0].label, stated_errors)
    return errors


@dataclass
class RateProbe:
    rate: float
    goodput_perc: float | None
    interval: tuple[float, float] | None
    meets: bool


@dataclass
class MaxRate:
    target_perc: float
    probes: list[RateProbe]
    meets: RateProbe | None  # the highest rate measured that meets the target
    misses: RateProbe | None  # the lowest rate measured above it that misses

    def describe(self) -> str:
        def probe(entry: RateProbe) -> str:
            interval = f", 95% {entry.interval[0]:.1f} to {entry.interval[1]:.1f}" if entry.interval else ""
            goodput = "no requests" if entry.goodput_perc is None else f"goodput {entry.goodput_perc:.1f}%{interval}"
            return f"{entry.rate:.3g} req/s ({goodput})"

        target = f"at least {self.target_perc:g}% of arrived requests meeting every SLO"
        runs = f"{len(self.probes)} runs"
        if self.meets is None:
            return f"no rate tried meets {target}; the lowest, {probe(self.probes[-1])}, misses ({runs})"
        if self.misses is None:
            return f"every rate tried meets {target}, up to {probe(self.meets)} ({runs})"
        return (
            f"highest arrival rate with {target}: {self.meets.rate:.3g} req/s; bracket: {probe(self.meets)} meets, "
            f"{probe(self.misses)} misses ({runs})"
        )


def check_search_settings(target_perc: float, tolerance: float) -> None:
    """A rate search's goodput target and tolerance, refused before any run."""
    if not 0 < target_perc <= 100 or not tolerance > 0:
        raise ConfigError(
            f"--goodput-target: expected a percentage in (0, 100], got {target_perc:g}; --tolerance: expected more "
            f"than 0, got {tolerance:g}"
        )


def find_max_rate(
    run_at: Callable[[float], dict],
    start_rate: float,
    target_perc: float = 90.0,
    tolerance: float = 0.1,
    max_runs: int = 12,
) -> MaxRate:
    """The highest arrival rate whose run meets the goodput target, to within `tolerance` (0.1: the
    bracket's ends within 10% of each other). `run_at(rate)` runs one point and returns its report."""
    check_search_settings(target_perc, tolerance)
    if max_runs < 2 or start_rate <= 0:
        raise ConfigError(f"expected at least 2 runs and a positive start rate; got {max_runs}, {start_rate}")
    probes: list[RateProbe] = []

    def probe(rate: float) -> RateProbe:
        entry = run_at(rate)["metrics"]["goodput_perc"]
        interval = entry.get("interval")
        value = entry.get("value")
        result = RateProbe(
            rate,
            value,
            (interval["low"], interval["high"]) if interval else None,
            value is not None and value >= target_perc,
        )
        probes.append(result)
        return result

    first = probe(start_rate)
    meets, misses = (first, None) if first.meets else (None, first)
    while (meets is None or misses is None) and len(probes) < max_runs:
        candidate = probe(meets.rate * 2 if meets is not None else misses.rate / 2)
        if candidate.meets:
            meets = candidate
        else:
            misses = candidate
    while meets and misses and misses.rate / meets.rate > 1 + tolerance and len(probes) < max_runs:
        candidate = probe(math.sqrt(meets.rate * misses.rate))
        if candidate.meets:
            meets = candidate
        else:
            misses = candidate
    return MaxRate(target_perc, probes, meets, misses)
