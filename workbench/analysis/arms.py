"""A preset's two arms side by side, from the folder `workbench bench --preset P` writes (one
sub-folder per variant, each with its report.json): latency, throughput and goodput with n,
memory by part, KV capacity and why it differs, the quality each configuration costs against the
file's own weights (from the quality ledger), and the decision's verdict. No Qt: the window's
Arms tab (workbench/gui/arms_view.py) draws what this returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError
from engine.quantization import UNQUANTIZED
from workbench.analysis.compare import (
    Change,
    change_of,
    compare,
    compare_repeats,
    describe_term,
    load_report,
    summarise_runs,
)
from workbench.analysis.kv_capacity import count_text, mib_text, why_kv_capacity_differs
from workbench.quality.ledger import EXACT, measured_quality


@dataclass
class ArmsRow:
    what: str  # with its unit
    baseline: str
    candidate: str
    change: str  # relative (points for a share) with its 95% interval as the decision has it, or ""


@dataclass
class Arms:
    folder: Path
    baseline: str  # variant names
    candidate: str
    rows: list[ArmsRow]
    kv_capacity_why: str
    verdict: str
    checks: list[str]  # one line per intended gain or tolerated regression: its status, estimate and interval
    differences: list[str]  # what else differs between the runs (compare.differences)
    repeats: int = 1  # pairs of runs behind the figures (bench --repeat)
    preset: str = ""  # the preset's name, as its runs' reports give it


# (metric in report.json, label with unit, decimals, relative change): a share changes in points.
_SPEED_ROWS = (
    ("ttft_p50_ms", "TTFT p50 (ms)", 0, True),
    ("ttft_p99_ms", "TTFT p99 (ms)", 0, True),
    ("tpot_p50_ms", "TPOT p50 (ms/token)", 1, True),
    ("tpot_p99_ms", "TPOT p99 (ms/token)", 1, True),
    ("output_tok_s", "output (tokens/s)", 1, True),
    ("goodput_perc", "goodput (% of requests meeting every SLO)", 1, False),
)


def read_arms(folder: Path) -> Arms:
    """The two arms in `folder`: the preset's decision names them (baseline, candidate), otherwise
    the first two variant folders by name. A folder of repeats (`bench --repeat N`: one
    `repeat-K` folder per repeat) shows each figure as the mean over the repeats, and the verdict
    on the paired repeats."""
    repeats = sorted(folder.glob("repeat-*/"), key=lambda path: int(path.name.removeprefix("repeat-") or 0))
    runs = [_variant_reports(repeat) for repeat in repeats] or [_variant_reports(folder)]
    runs = [reports for reports in runs if len(reports) >= 2]  # a repeat stopped part-way is left out
    if not runs:
        raise ConfigError(
            f"{folder}: expected a sub-folder per variant, each with a report.json (what "
            f"`workbench bench --preset P` writes for a preset with variants), or repeat-K folders of them; "
            f"found {len(_variant_reports(folder))}"
        )
    decision = next(iter(runs[0].values()))["scenario"].get("decision") or {}
    names = the_two_arms(list(runs[0]), decision)
    pairs = [(reports[names[0]], reports[names[1]]) for reports in runs if all(name in reports for name in names)]
    intended, tolerated = decision.get("intended", []), decision.get("tolerated", [])
    if len(pairs) == 1:
        base, cand = pairs[0]
        result = compare(base, cand, intended, tolerated)
    else:
        result = compare_repeats(pairs, intended, tolerated)
        # Each arm as its first run, its figures the means over the repeats.
        base, cand = ({**arm_runs[0], "metrics": summarise_runs(list(arm_runs))["metrics"]} for arm_runs in zip(*pairs))
    rows = [
        _metric_row(label, base, cand, key, decimals, change_text(change_of(key, pairs, relative), relative))
        for key, label, decimals, relative in _SPEED_ROWS
    ]
    rows += _memory_rows(base["engine"], cand["engine"])
    rows.append(ArmsRow("quality vs the file's own weights", _quality(base), _quality(cand), ""))
    return Arms(
        folder,
        names[0],
        names[1],
        rows,
        why_kv_capacity_differs(base, cand),
        result["verdict"],
        [describe_term(item) for item in result["checks"]],
        result["differences"],
        len(pairs),
        base["scenario"].get("name", ""),
    )


def the_two_arms(variants: list[str], decision: dict) -> list[str]:
    """Which two variants are the arms: the decision's baseline and candidate, otherwise the first
    two by name. The Arms view runs these two alone and shows them."""
    named = [decision.get("baseline"), decision.get("candidate")]
    return named if all(name in variants for name in named) else sorted(variants)[:2]


def _variant_reports(folder: Path) -> dict[str, dict]:
    return {path.parent.name: load_report(path.parent) for path in sorted(folder.glob("*/report.json"))}


def change_text(change: Change, relative: bool) -> str:
    """A change with its 95% interval as the decision record has it, or why it has none."""
    if change.estimate is None:
        return ""
    shown = (lambda value: f"{value * 100:+.1f}%") if relative else (lambda value: f"{value:+.1f}pp")  # noqa: E731
    if change.interval is None:
        return f"{shown(change.estimate)} (no interval: one run each)"
    low, high = ("no bound" if bound is None else shown(bound) for bound in (change.interval.low, change.interval.high))
    return f"{shown(change.estimate)} [95% {low} to {high}]"


def _metric_row(label: str, base: dict, cand: dict, key: str, decimals: int, change: str) -> ArmsRow:
    def shown(report: dict) -> str:
        metric = report["metrics"].get(key) or {}
        value = metric.get("value")
        if value is None:
            return "-"
        runs = f", mean of {metric['runs']} runs" if metric.get("runs", 1) > 1 else ""
        return f"{value:,.{decimals}f} (n={metric.get('n')}{runs})"

    return ArmsRow(label, shown(base), shown(cand), change)


def _relative(first: float | None, second: float | None) -> str:
    return f"{(second - first) / first * 100:+.1f}%" if first and second is not None else ""


def _memory_rows(base: dict, cand: dict) -> list[ArmsRow]:
    """Weights by part (what each format keeps: packed integers and scales, or floats), the KV
    cache, and the tokens it holds."""
    rows = []
    for part in sorted(set(base.get("weight_parts") or {}) | set(cand.get("weight_parts") or {})):
        first, second = ((engine.get("weight_parts") or {}).get(part) for engine in (base, cand))
        rows.append(ArmsRow(f"weights: {part} (MiB)", mib_text(first), mib_text(second), ""))
    for key, label in (("weight_bytes", "weights in all (MiB)"), ("kv_cache_bytes", "KV cache (MiB)")):
        rows.append(
            ArmsRow(label, mib_text(base.get(key)), mib_text(cand.get(key)), _relative(base.get(key), cand.get(key)))
        )
    for key, label in (("kv_bytes_per_token", "KV bytes per token"), ("kv_capacity_tokens", "KV capacity (tokens)")):
        rows.append(
            ArmsRow(
                label, count_text(base.get(key)), count_text(cand.get(key)), _relative(base.get(key), cand.get(key))
            )
        )
    return rows


def _quality(report: dict) -> str:
    """perplexity change, top-1 agreement and n from the quality ledger, or how to measure them."""
    versions = report.get("versions", {})
    model = versions.get("model") or {}
    path = model.get("path") if isinstance(model, dict) else None
    if path is None:
        return "no weights (simulated)" if isinstance(model, dict) and "simulated" in model else "-"
    quantization, dtype, kv_dtype = (
        versions.get("quantization", "?"),
        versions.get("dtype", "?"),
        versions.get("kv_cache_dtype", "?"),
    )
    if quantization == UNQUANTIZED and dtype == kv_dtype == "float32":
        return EXACT
    try:
        figures = measured_quality(path, quantization, dtype, kv_dtype)
    except OSError:  # the model file has moved since the run
        figures = None
    if figures is None:
        option = report["scenario"].get("engine", {}).get("quantization", "auto")
        return f"not measured: workbench quality --quant {option}"
    return (
        f"perplexity {figures['perplexity_change_perc']:+.2f}%, top-1 agreement {figures['top1_agreement_perc']:.1f}% "
        f"(n={figures['evaluated_tokens']:,} tokens)"
    )
