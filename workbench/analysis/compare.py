"""Compare two runs: every metric side by side with absolute and relative deltas, and a decision
record that checks the intended gain and the tolerated regression declared before the runs.

A criterion reads `METRIC:+20%` or `METRIC:-50%` (relative) or `METRIC:+5` (absolute, in the
metric's unit). For an intended gain the candidate must move at least that far in that direction;
for a tolerated regression it must not move further than that in that direction. Each term is
judged on the interval of the change, not on its point estimate (workbench/analysis/verdict.py): accept,
reject or inconclusive. One pair of runs takes its intervals from each run's own (request-to-request
noise); repeated pairs (`workbench bench --repeat N`, `compare_repeats`) from the spread of the
paired changes, which covers the machine's drift between runs as well.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError
from engine.simulation.target import SimulatedTarget, is_simulated
from workbench.analysis.intervals import (
    LEVEL,
    PAIR_LEVEL,
    Interval,
    bounds_text,
    change_of_percentile,
    change_over_repeats,
    difference_of_shares,
    repeats_interval,
    requests_to_bound,
)
from workbench.analysis.report import CONFIGURATION_PREFIXES
from workbench.analysis.stated_error import UNCHECKED, kind_of
from workbench.analysis.verdict import Term, decide, repeats_needed_text
from workbench.machine.probe import machine_drift

REPORT_KEYS = ("scenario", "seed", "complete", "metrics")
# Figures that move with the machine's speed: latencies, token and request rates.
_SPEED_SUFFIXES = ("_ms", "_tok_s", "_req_s")
# The drift tolerated where a decision has no relative threshold above zero.
DEFAULT_DRIFT_TOLERANCE = 0.05
# `%`: relative; `pp`: percentage points of a figure that is itself a percentage (absolute).
_CRITERION = re.compile(r"^(?P<metric>[\w/.-]+):(?P<sign>[+-])(?P<amount>\d+(?:\.\d+)?)(?P<suffix>%|pp)?$")


@dataclass(frozen=True)
class Criterion:
    metric: str
    change: float  # signed; a fraction when relative (+20% -> +0.2), else in the metric's unit
    relative: bool
    points: bool = False  # written in percentage points (`-2pp`): absolute, the metric being a percentage

    @classmethod
    def parse(cls, text: str) -> Criterion:
        match = _CRITERION.match(text.strip())
        if match is None:
            raise ConfigError(
                f"criterion {text!r}: expected METRIC:+N%, METRIC:-N or METRIC:-Npp (e.g. output_tok_s:+20%)"
            )
        amount = float(match["amount"]) * (1 if match["sign"] == "+" else -1)
        relative = match["suffix"] == "%"
        return cls(match["metric"], amount / 100 if relative else amount, relative, match["suffix"] == "pp")

    def __str__(self) -> str:
        amount = f"{self.change * 100:+g}%" if self.relative else f"{self.change:+g}{'pp' if self.points else ''}"
        return f"{self.metric}:{amount}"


def load_report(run: str | Path) -> dict:
    path = Path(run)
    path = path / "report.json" if path.is_dir() else path
    try:
        report = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise ConfigError(f"{path}: no report found (expected a run folder with report.json)") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
    missing = [key for key in REPORT_KEYS if not isinstance(report, dict) or key not in report]
    if missing:
        raise ConfigError(f"{path}: not a workbench report (missing {', '.join(missing)})")
    metrics = report["metrics"]
    if not isinstance(metrics, dict) or not all(
        isinstance(entry, dict) and {"value", "unit", "n"} <= set(entry) for entry in metrics.values()
    ):
        raise ConfigError(
            f'{path}: metrics: expected an object of {{"value", "unit", "n"}} entries, got {json.dumps(metrics)[:80]}'
        )
    return report


def metric_rows(baseline: dict, candidate: dict) -> list[dict]:
    rows = []
    for name in sorted(set(baseline["metrics"]) | set(candidate["metrics"])):
        first, second = baseline["metrics"].get(name), candidate["metrics"].get(name)
        a = first["value"] if first else None
        b = second["value"] if second else None
        delta = b - a if _number(a) and _number(b) else None
        relative = delta / abs(a) if delta is not None and a else None
        unit = (first or second)["unit"]
        rows.append(
            {
                "metric": name,
                "unit": unit,
                "baseline": a,
                "candidate": b,
                "delta": delta,
                "relative": relative,
                "n_baseline": first["n"] if first else 0,
                "n_candidate": second["n"] if second else 0,
                "baseline_interval": (first or {}).get("interval"),
                "candidate_interval": (second or {}).get("interval"),
            }
        )
    return rows


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


# A latency percentile's name (`ttft_p99_ms`, `chat/e2e_p90_ms`): its q.
_PERCENTILE = re.compile(r"_p(?P<q>\d+)_ms$")
# A share of requests (goodput): its change is in percentage points.
_SHARE_SUFFIX = "goodput_perc"


@dataclass(frozen=True)
class Change:
    """The change of one figure from baseline to candidate over pairs of runs: its estimate, its
    95% interval (None where the data give none) and what else the reader must know."""

    estimate: float | None
    interval: Interval | None
    caveat: str = ""


def change_of(metric: str, pairs: list[tuple[dict, dict]], relative: bool) -> Change:
    """The one definition of a change between two arms, for the decision record and the Arms
    view alike (workbench/analysis/intervals.py names each method):

    - a deterministic figure in every run (memory, quality): the exact change, no interval pretence;
    - one pair of runs: a percentile from both runs' order-statistic intervals, goodput by
      Newcombe's interval (in points), any other figure has no interval within a run;
    - repeated pairs: Student's t over the paired changes (log ratios when relative)."""
    entries = [
        (baseline["metrics"].get(metric) or {}, candidate["metrics"].get(metric) or {}) for baseline, candidate in pairs
    ]
    firsts = [first.get("value") for first, _ in entries]
    seconds = [second.get("value") for _, second in entries]
    if not all(_number(value) for value in firsts + seconds) or (relative and not all(value > 0 for value in firsts)):
        return Change(None, None)
    if relative and metric.endswith(_SHARE_SUFFIX):
        return Change(None, None, "a share of requests changes in points (pp), not in percent of itself")
    changes = [(second - first) / first if relative else second - first for first, second in zip(firsts, seconds)]
    if _all_exact(entries):
        estimate = sum(changes) / len(changes)
        return Change(estimate, Interval.exact(estimate, "the figure is deterministic in every run"))
    caveat = _percentile_caveat(metric, entries, paired=len(pairs) == 1)
    if len(pairs) == 1:
        return Change(changes[0], _interval_of_one_pair(metric, *entries[0], relative), caveat)
    interval = change_over_repeats(firsts, seconds, relative)
    if interval is None:  # a relative change of a figure at 0 in some candidate run: no log ratio
        return Change(sum(changes) / len(changes), None, caveat)
    if relative:  # the geometric mean change, the centre of the log-ratio interval
        estimate = math.expm1(sum(math.log1p(change) for change in changes) / len(changes))
    else:
        estimate = sum(changes) / len(changes)
    if len(pairs) == 2:
        caveat = "; ".join(
            part
            for part in (caveat, "2 pairs of runs: Student's t with 1 degree of freedom (12.7 standard errors wide)")
            if part
        )
    return Change(estimate, interval, caveat)


def _all_exact(entries: list[tuple[dict, dict]]) -> bool:
    intervals = [Interval.from_dict(entry.get("interval")) for pair in entries for entry in pair]
    return all(interval is not None and interval.is_exact for interval in intervals)


def _percentile_caveat(metric: str, entries: list[tuple[dict, dict]], paired: bool) -> str:
    """Where a run has too few requests to bound a percentile: which, and how many would."""
    match = _PERCENTILE.search(metric)
    if match is None:
        return ""
    q = int(match["q"])
    level = PAIR_LEVEL if paired else LEVEL
    needed = requests_to_bound(q, level)
    fewest = min(entry.get("n") or 0 for pair in entries for entry in pair)
    if fewest >= needed:
        return ""
    per = "per run for a comparison of one pair" if paired else "per run"
    return f"p{q} of {fewest} requests: not bounded above; about {needed} requests {per} would bound it"


def _interval_of_one_pair(metric: str, first: dict, second: dict, relative: bool) -> Interval | None:
    if _PERCENTILE.search(metric):
        a, b = (Interval.from_dict(entry.get("pair_interval")) for entry in (first, second))
        return None if a is None or b is None else change_of_percentile(a, b, relative)
    if metric.endswith(_SHARE_SUFFIX) and first.get("n") and second.get("n"):
        return difference_of_shares(_hits(first), first["n"], _hits(second), second["n"])
    return None


def _hits(entry: dict) -> int:
    """The requests meeting every SLO behind a goodput entry (its value is a percentage of n)."""
    return round(entry["value"] * entry["n"] / 100)


def term(criterion: Criterion, kind: str, pairs: list[tuple[dict, dict]]) -> Term:
    """The evidence for one criterion from pairs of runs (baseline, candidate), one pair per
    repeat: the change and its interval (`change_of`)."""
    names = set()
    for baseline, candidate in pairs:
        names |= set(baseline["metrics"]) | set(candidate["metrics"])
    if criterion.metric not in names:
        raise ConfigError(f"criterion {criterion}: no metric {criterion.metric!r} in the reports")
    if criterion.relative and criterion.metric.endswith(_SHARE_SUFFIX):
        raise ConfigError(
            f"criterion {criterion}: {criterion.metric} is a share of requests: state its change in points "
            f"({criterion.metric}:{criterion.change * 100:+g}pp)"
        )
    entries = [
        (baseline["metrics"].get(criterion.metric) or {}, candidate["metrics"].get(criterion.metric) or {})
        for baseline, candidate in pairs
    ]
    change = change_of(criterion.metric, pairs, criterion.relative)
    return Term(
        kind=kind,
        criterion=str(criterion),
        threshold=criterion.change,
        relative=criterion.relative,
        estimate=change.estimate,
        interval=change.interval,
        runs=len(pairs),
        n_baseline=min(first.get("n") or 0 for first, _ in entries),
        n_candidate=min(second.get("n") or 0 for _, second in entries),
        subgroup="/" in criterion.metric and not criterion.metric.startswith(CONFIGURATION_PREFIXES),
        unit=next((entry["unit"] for pair in entries for entry in pair if entry.get("unit")), ""),
        caveat=change.caveat,
    )


def drift_tolerance(terms: list[Term]) -> float:
    """How far the machine may drift before a comparison's speed figures are in doubt: its
    smallest relative threshold (DEFAULT_DRIFT_TOLERANCE where it has none above zero)."""
    thresholds = [abs(term.threshold) for term in terms if term.relative and term.threshold]
    return min(thresholds, default=DEFAULT_DRIFT_TOLERANCE)


def allow_for_drift(terms: list[Term], drift: float | None) -> list[Term]:
    """Widen each relative speed term's interval by the machine's drift between the runs, where
    that drift is beyond the tolerance: a change that size may be the machine's, not the
    candidate's."""
    if drift is None or drift <= drift_tolerance(terms):
        return terms
    caveat = f"the machine's speed moved {drift * 100:.1f}% across the runs' probes: interval widened by it"
    return _widened(terms, lambda metric: (drift, caveat), "widened by the machine's drift")


def allow_for_simulator_error(terms: list[Term], baseline: dict, candidate: dict) -> list[Term]:
    """Widen each relative speed term's interval by the simulated GPUs' stated error for that kind
    of figure (the larger of the two runs' stacks): a simulated change is worth what the
    simulator is (presets/published/errors.toml)."""
    errors = [report.get("simulated_error") for report in (baseline, candidate)]
    if not all(errors):
        return terms

    def widening(metric: str) -> tuple[float, str] | None:
        kind = kind_of(metric)
        stated = [error[kind]["median_abs_perc"] for error in errors]
        if any(value is None for value in stated):
            return None
        return max(stated) / 100, f"simulated: interval widened by the stack's ±{max(stated):.0f}% {kind} error"

    def unchecked(term: Term) -> Term:
        """A speed term no published run checks in either run's region says so: its interval is
        the runs' own, the simulator's error there unknown."""
        metric = term.criterion.partition(":")[0]
        kind = kind_of(metric)
        if not metric.endswith(_SPEED_SUFFIXES) or all(error[kind]["median_abs_perc"] is not None for error in errors):
            return term
        caveat = f"simulated: {UNCHECKED} ({kind}): the simulator's error here is unknown"
        return dataclasses.replace(term, caveat="; ".join(filter(None, (term.caveat, caveat))))

    return [unchecked(term) for term in _widened(terms, widening, "widened by the simulator's error")]


def _widened(terms: list[Term], widening, method: str) -> list[Term]:
    """Each relative speed term's interval, on the ratio's scale, divided and multiplied by 1 + w
    (a widened change stays above -100%), where `widening(metric)` gives (w, caveat)."""
    widened = []
    for term in terms:
        metric = term.criterion.partition(":")[0]
        how = widening(metric) if term.relative and term.interval is not None else None
        if how is not None and metric.endswith(_SPEED_SUFFIXES):
            by, caveat = how
            low, high = term.interval.low, term.interval.high
            interval = Interval(
                None if low is None else (1 + low) / (1 + by) - 1,
                None if high is None else (1 + high) * (1 + by) - 1,
                term.interval.standard_error,
                f"{term.interval.method}; {method}",
            )
            term = dataclasses.replace(term, interval=interval, caveat="; ".join(filter(None, (term.caveat, caveat))))
        widened.append(term)
    return widened


def decision_terms(pairs: list[tuple[dict, dict]], intended: list[str], tolerated: list[str]) -> list[Term]:
    terms = [term(Criterion.parse(text), "intended", pairs) for text in intended]
    return terms + [term(Criterion.parse(text), "tolerated", pairs) for text in tolerated]


def incomplete_runs(pairs: list[tuple[dict, dict]]) -> list[str]:
    return [
        f"{role}{f' (repeat {index})' if len(pairs) > 1 else ''} "
        f"({'; '.join(report.get('incomplete_because') or ['incomplete'])})"
        for index, pair in enumerate(pairs, 1)
        for role, report in zip(("baseline", "candidate"), pair)
        if not report["complete"]
    ]


def verdict_of(pairs: list[tuple[dict, dict]], terms: list[Term]) -> tuple[str, str]:
    incomplete = incomplete_runs(pairs)
    if incomplete:
        return "none", f"no verdict: incomplete run: {', '.join(incomplete)}"
    return decide(terms)


def runs_repeat_exactly(report: dict) -> bool:
    """A run on in-process simulated GPUs (one engine or a deployment of several): its clock is
    the cost model's, so the same settings and seed give the same figures to the last digit (a
    replay reproduces every latency). Anything else (this machine, a server) varies from run to
    run beyond its requests' noise."""
    model = str(report.get("scenario", {}).get("engine", {}).get("model", ""))
    backend = report.get("backend", {}).get("name", "in-process engine")
    return is_simulated(model) and backend.startswith("in-process")


def compare_folders(
    baseline: str | Path, candidate: str | Path, intended: list[str] | None = None, tolerated: list[str] | None = None
) -> dict:
    """Two run folders compared: against `intended` / `tolerated` where given, otherwise against
    the decision the candidate's scenario declared before the runs. `workbench compare` and the
    window's Runs tab both call this."""
    first, second = load_report(baseline), load_report(candidate)
    if intended is None and tolerated is None:
        declared = second["scenario"].get("decision") or {}
        intended, tolerated = declared.get("intended", []), declared.get("tolerated", [])
    return compare(first, second, intended or [], tolerated or [])


def compare(baseline: dict, candidate: dict, intended: list[str], tolerated: list[str]) -> dict:
    pairs = [(baseline, candidate)]
    drift = machine_drift(baseline, candidate)
    terms = allow_for_drift(decision_terms(pairs, intended, tolerated), drift)
    terms = allow_for_simulator_error(terms, baseline, candidate)
    if not (runs_repeat_exactly(baseline) and runs_repeat_exactly(candidate)):
        # One pair's intervals cover the requests' noise only; a measured figure needs repeats to decide.
        terms = [
            dataclasses.replace(term, needs_repeats=True)
            if term.interval is not None and not term.interval.is_exact
            else term
            for term in terms
        ]
    decision, verdict = verdict_of(pairs, terms)
    return {
        "baseline": _identity(baseline),
        "candidate": _identity(candidate),
        "machine_drift": drift,
        "differences": differences(baseline, candidate),
        "intended": intended,
        "tolerated": tolerated,
        "checks": [term.as_dict() for term in terms],
        "decision": decision,
        "verdict": verdict,
        "metrics": metric_rows(baseline, candidate),
    }


def compare_repeats(pairs: list[tuple[dict, dict]], intended: list[str], tolerated: list[str]) -> dict:
    """A decision over repeated pairs of runs (one pair per repeat): each variant's figures as
    the mean over its runs with the t interval of the per-run values, and each term judged on the
    interval of its paired changes."""
    terms = decision_terms(pairs, intended, tolerated)
    decision, verdict = verdict_of(pairs, terms)
    baselines, candidates = [baseline for baseline, _ in pairs], [candidate for _, candidate in pairs]
    return {
        "baseline": {**_identity(baselines[0]), "seed": [report["seed"] for report in baselines]},
        "candidate": {**_identity(candidates[0]), "seed": [report["seed"] for report in candidates]},
        "repeats": len(pairs),
        # Pairing by repeat takes the drift between repeats into the interval; this says how large it was.
        "machine_drift": machine_drift(*baselines, *candidates),
        "differences": differences(baselines[0], candidates[0]),
        "intended": intended,
        "tolerated": tolerated,
        "checks": [term.as_dict() for term in terms],
        "decision": decision,
        "verdict": verdict,
        "metrics": metric_rows(summarise_runs(baselines), summarise_runs(candidates)),
    }


def summarise_runs(reports: list[dict]) -> dict:
    """Reports of one variant's runs as one: each figure the mean of the runs' values, n the
    requests (or steps) of all runs together, the interval Student's t over the per-run values
    (within the figure's bounds: `_within_bounds`). A deterministic figure
    (the same in every run: memory, quality) keeps its one run's n and zero-width interval."""
    metrics = {}
    for name in sorted({name for report in reports for name in report["metrics"]}):
        entries = [report["metrics"].get(name) or {} for report in reports]
        values = [entry.get("value") for entry in entries]
        present = [value for value in values if _number(value)]
        unit = next(entry["unit"] for entry in entries if entry)
        intervals = [Interval.from_dict(entry.get("interval")) for entry in entries]
        exact = all(interval is not None and interval.is_exact for interval in intervals) and len(set(values)) == 1
        if exact:
            interval, n = intervals[0], entries[0].get("n") or 0
        else:
            interval = repeats_interval(present) if len(present) == len(values) else None
            n = sum(entry.get("n") or 0 for entry in entries)
            if interval is not None:
                interval = _within_bounds(interval, name, present)
        metrics[name] = {
            "value": sum(present) / len(present) if present else None,
            "unit": unit,
            "n": n,
            "runs": len(present),
            "interval": None if interval is None else interval.as_dict(),
        }
    return {"metrics": metrics}


def _within_bounds(interval: Interval, name: str, values: list[float]) -> Interval:
    """Student's t is symmetric and knows no bounds: a figure that cannot be negative keeps its
    interval at 0 and above, a share of requests, tokens or blocks (`_perc`) at 100 and below."""
    low, high, clipped = interval.low, interval.high, []
    if low < 0 <= min(values):
        low = 0.0
        clipped.append("at 0")
    if name.endswith("_perc") and high > 100 >= max(values):
        high = 100.0
        clipped.append("at 100")
    if not clipped:
        return interval
    return dataclasses.replace(
        interval, low=low, high=high, method=f"{interval.method}, clipped {' and '.join(clipped)}"
    )


def differences(baseline: dict, candidate: dict) -> list[str]:
    """What makes the two runs unlike beyond a configuration choice: another model file, other
    hardware or server, or other traffic. Comparing them is allowed (that may be the question),
    but the figures then do not isolate one change, and the comparison says so."""
    found = []
    for what, read in (("model", _model), ("hardware", _hardware), ("workload (traffic, events, seed)", _workload)):
        first, second = read(baseline), read(candidate)
        if first != second:
            found.append(f"{what}: {_short(first)} vs {_short(second)}")
    return found


def _model(report: dict):
    model = report.get("versions", {}).get("model")
    if isinstance(model, dict):  # a model file: what its bytes hash to, wherever it lies
        if model.get("simulated"):  # simulated:MODEL@HARDWARE: the model's shape (the hardware is compared apart)
            return SimulatedTarget.parse(model["simulated"]).model
        return model.get("files") or model.get("path")
    return model or report.get("scenario", {}).get("engine", {}).get("model")


def _hardware(report: dict) -> str:
    backend = report.get("backend", {}).get("name", "in-process engine")
    model = str(report.get("scenario", {}).get("engine", {}).get("model", ""))
    if backend != "in-process engine":
        return backend
    if is_simulated(model):
        return f"simulated {SimulatedTarget.parse(model).hardware}"
    return report.get("versions", {}).get("device", "unknown")


def _workload(report: dict) -> str:
    scenario = report.get("scenario", {})
    return json.dumps([scenario.get("traffic"), scenario.get("events"), report.get("seed")], sort_keys=True)


def _short(value) -> str:
    if isinstance(value, dict):  # file hashes
        return ", ".join(f"{name} {digest[:8]}" for name, digest in sorted(value.items()))
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _identity(report: dict) -> dict:
    return {
        "scenario": report["scenario"]["name"],
        "variant": report.get("variant"),
        "seed": report["seed"],
        "complete": report["complete"],
    }


def format_comparison(result: dict) -> str:
    def show(value) -> str:
        if value is None:
            return "-"
        return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"

    base, cand = result["baseline"], result["candidate"]
    lines = [
        f"baseline:  {base['scenario']} / {base['variant'] or '-'} (seed {base['seed']})",
        f"candidate: {cand['scenario']} / {cand['variant'] or '-'} (seed {cand['seed']})",
        *(
            [f"machine: its speed moved {result['machine_drift'] * 100:.1f}% across the runs' probes (copy, matmul)"]
            if result.get("machine_drift") is not None
            else []
        ),
        *(
            [
                f"{result['repeats']} repeats of each: figures are means over the runs, n the requests (or steps) of "
                "all runs, intervals Student's t over the per-run values"
            ]
            if result.get("repeats", 1) > 1
            else []
        ),
        *(
            ["warning: these runs differ in more than a configuration, so no delta isolates one change:"]
            + [f"  {difference}" for difference in result.get("differences", [])]
            if result.get("differences")
            else []
        ),
        "",
        f"{'metric':<34} {'baseline':>12} {'candidate':>12} {'delta':>12} {'rel':>8}  n (b/c)  unit; 95% intervals",
    ]
    for row in result["metrics"]:
        relative = f"{row['relative'] * 100:+.1f}%" if row["relative"] is not None else "-"
        intervals = [
            f"{role} {_interval_text(interval)}"
            for role, interval in (("b", row.get("baseline_interval")), ("c", row.get("candidate_interval")))
            if interval
        ]
        lines.append(
            f"{row['metric']:<34} {show(row['baseline']):>12} {show(row['candidate']):>12} {show(row['delta']):>12} "
            f"{relative:>8}  {row['n_baseline']}/{row['n_candidate']}  {row['unit']}"
            + (f"; {', '.join(intervals)}" if intervals else "")
        )
    lines += ["", "decision record:", *(f"  {describe_term(item)}" for item in result["checks"])]
    lines.append(f"verdict: {result['verdict']}")
    return "\n".join(lines)


def describe_term(item: dict) -> str:
    """One line of a decision record: status, term, estimate, interval, n, runs and why."""
    if item["relative"]:
        shown = lambda value: f"{value * 100:+.1f}%"  # noqa: E731
    else:
        metric, _, threshold = item["criterion"].partition(":")
        unit = "pp" if threshold.endswith("pp") else short_unit(metric, item.get("unit", ""))
        shown = lambda value: f"{value:+.3g}{'' if unit == 'pp' else ' '}{unit}"  # noqa: E731
    estimate = "-" if item["estimate"] is None else shown(item["estimate"])
    interval = item["interval"]
    between = f" [95% {bounds_text(interval['low'], interval['high'], shown)}]" if interval else ""
    runs = f"{item['runs']} pair{'s' if item['runs'] != 1 else ''} of runs"
    needed = f"; {repeats_needed_text(item['repeats_needed'])}" if item["repeats_needed"] else ""
    note = f"; {item['note']}" if item["note"] else ""
    return (
        f"{item['status'].upper():<9} {item['kind']:<9} {item['criterion']:<28} estimate {estimate}{between} "
        f"(n {item['n_baseline']}/{item['n_candidate']}, {runs}{needed}){note}"
    )


# A change's unit from the metric's name, where the name says it.
_SHORT_UNITS = {"_ms": "ms", "_tok_s": "tok/s", "_req_s": "req/s", "_mib": "MiB"}


def short_unit(metric: str, unit: str) -> str:
    """The unit of an absolute change, short enough for a record's line: from the metric's name
    (a change of a percentage is in points), else the first word of its unit ("nats/token")."""
    for suffix, short in _SHORT_UNITS.items():
        if metric.endswith(suffix):
            return short
    if unit.startswith("%"):
        return "pp"
    return unit.replace(",", " ").split(" ")[0]


def _interval_text(interval: dict) -> str:
    return f"[{bounds_text(interval['low'], interval['high'])}]"
