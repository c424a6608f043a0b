"""A run's report in a few lines: its headline figures with units, n and intervals (the CLI prints
them after a run; the window's Runs tab shows them after Save run)."""

from __future__ import annotations

from workbench.analysis.intervals import bounds_text

HEADLINE_METRICS = [
    "output_tok_s",
    "request_throughput_req_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "e2e_p99_ms",
    "goodput_perc",
    "preemptions",
    "kv_usage_peak_perc",
    "prefix_cache_hit_perc",
]


def summary_lines(report: dict) -> list[str]:
    metrics = report["metrics"]

    def line(name: str) -> str:
        entry = metrics[name]
        value = "-" if entry["value"] is None else f"{entry['value']:,.1f}"
        interval = entry.get("interval")
        between = (
            f", 95% {bounds_text(interval['low'], interval['high'], lambda bound: f'{bound:,.1f}')}" if interval else ""
        )
        return f"  {name:<28} {value:>10} {entry['unit']} (n={entry['n']}{between})"

    status = "complete" if report["complete"] else "INCOMPLETE (built from the run log)"
    lines = [f"{report['scenario']['name']} / {report['variant'] or '-'}: {status}"]
    if report.get("beside_compile"):
        lines.append(f"  warm-up: {report['beside_compile']}")
    lines += [line(name) for name in HEADLINE_METRICS]
    lines += [f"  {error['says']}" for error in (report.get("simulated_error") or {}).values()]
    if report.get("ended_early_by_reason"):  # asked for N tokens, got fewer: why
        reasons = ", ".join(f"{why} {count}" for why, count in report["ended_early_by_reason"].items())
        lines.append(f"{line('requests_ended_early')}: {reasons}")
    return lines
