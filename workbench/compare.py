"""Compare two runs: every metric side by side with absolute and relative deltas, and a decision
record that checks the intended gain and the tolerated regression declared before the runs.

A criterion reads `METRIC:+20%` or `METRIC:-50%` (relative) or `METRIC:+5` (absolute, in the
metric's unit). For an intended gain the candidate must move at least that far in that direction;
for a tolerated regression it must not move further than that in that direction.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError

REPORT_KEYS = ("scenario", "seed", "complete", "metrics")
_CRITERION = re.compile(r"^(?P<metric>[\w/.-]+):(?P<sign>[+-])(?P<amount>\d+(?:\.\d+)?)(?P<percent>%?)$")


@dataclass(frozen=True)
class Criterion:
    metric: str
    change: float  # signed; a fraction when relative (+20% -> +0.2), else in the metric's unit
    relative: bool

    @classmethod
    def parse(cls, text: str) -> Criterion:
        match = _CRITERION.match(text.strip())
        if match is None:
            raise ConfigError(f"criterion {text!r}: expected METRIC:+N% or METRIC:-N (e.g. output_tok_s:+20%)")
        amount = float(match["amount"]) * (1 if match["sign"] == "+" else -1)
        relative = bool(match["percent"])
        return cls(match["metric"], amount / 100 if relative else amount, relative)

    def __str__(self) -> str:
        amount = f"{self.change * 100:+g}%" if self.relative else f"{self.change:+g}"
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
            }
        )
    return rows


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


def check(criterion: Criterion, rows: dict[str, dict], kind: str) -> dict:
    row = rows.get(criterion.metric)
    if row is None:
        raise ConfigError(f"criterion {criterion}: no metric {criterion.metric!r} in the reports")
    moved = row["relative"] if criterion.relative else row["delta"]
    if moved is None:
        passed, note = False, "not measurable in both runs"
    elif kind == "intended":
        # A gain of +20% needs moved >= +0.2; a reduction of -50% needs moved <= -0.5.
        passed = moved >= criterion.change if criterion.change >= 0 else moved <= criterion.change
        note = ""
    else:
        # Tolerating -10% allows any move down to -0.1 (and any move in the other direction).
        passed = moved <= criterion.change if criterion.change >= 0 else moved >= criterion.change
        note = ""
    return {
        "kind": kind,
        "criterion": str(criterion),
        "observed": moved,
        "relative": criterion.relative,
        "passed": passed,
        "n_baseline": row["n_baseline"],
        "n_candidate": row["n_candidate"],
        "note": note,
    }


def compare(baseline: dict, candidate: dict, intended: list[str], tolerated: list[str]) -> dict:
    rows = metric_rows(baseline, candidate)
    by_name = {row["metric"]: row for row in rows}
    checks = [check(Criterion.parse(text), by_name, "intended") for text in intended]
    checks += [check(Criterion.parse(text), by_name, "tolerated") for text in tolerated]
    incomplete = [
        f"{role} ({'; '.join(report.get('incomplete_because') or ['incomplete'])})"
        for role, report in (("baseline", baseline), ("candidate", candidate))
        if not report["complete"]
    ]
    if incomplete:
        verdict = f"no verdict: incomplete run: {', '.join(incomplete)}"
    elif not checks:
        verdict = "no decision: no intended gain or tolerated regression was declared"
    elif all(result["passed"] for result in checks):
        verdict = "accept: every intended gain reached, every regression within tolerance"
    else:
        failed = ", ".join(result["criterion"] for result in checks if not result["passed"])
        verdict = f"reject: not met: {failed}"
    return {
        "baseline": _identity(baseline),
        "candidate": _identity(candidate),
        "differences": differences(baseline, candidate),
        "intended": intended,
        "tolerated": tolerated,
        "checks": checks,
        "verdict": verdict,
        "metrics": rows,
    }


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
        return model.get("files") or model.get("path")
    return model or report.get("scenario", {}).get("engine", {}).get("model")


def _hardware(report: dict) -> str:
    backend = report.get("backend", {}).get("name", "in-process engine")
    model = str(report.get("scenario", {}).get("engine", {}).get("model", ""))
    if backend != "in-process engine":
        return backend
    if model.startswith("simulated:"):
        return f"simulated {model.rpartition('@')[2]}"
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
            ["warning: these runs differ in more than a configuration, so no delta isolates one change:"]
            + [f"  {difference}" for difference in result.get("differences", [])]
            if result.get("differences")
            else []
        ),
        "",
        f"{'metric':<34} {'baseline':>12} {'candidate':>12} {'delta':>12} {'rel':>8}  n (b/c)  unit",
    ]
    for row in result["metrics"]:
        relative = f"{row['relative'] * 100:+.1f}%" if row["relative"] is not None else "-"
        lines.append(
            f"{row['metric']:<34} {show(row['baseline']):>12} {show(row['candidate']):>12} {show(row['delta']):>12} "
            f"{relative:>8}  {row['n_baseline']}/{row['n_candidate']}  {row['unit']}"
        )
    lines += ["", "decision record:"]
    for item in result["checks"]:
        observed = item["observed"]
        shown = "-" if observed is None else (f"{observed * 100:+.1f}%" if item["relative"] else f"{observed:+.3g}")
        lines.append(
            f"  {'PASS' if item['passed'] else 'FAIL'} {item['kind']:<9} {item['criterion']:<28} observed {shown} "
            f"(n {item['n_baseline']}/{item['n_candidate']}) {item['note']}"
        )
    lines.append(f"verdict: {result['verdict']}")
    return "\n".join(lines)
