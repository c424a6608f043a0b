"""How far the calibrated simulator is from the real engine, end to end: the same requests run on
the bundled model on this machine and replayed on `simulated:smollm2-135m@<calibrated profile>`,
and the error of each headline figure with its n.

An error is simulated / real - 1. The summary takes the median |error| over the p50 figures and
over the p99 figures of every preset, against Vidur's bar (under 9% on end-to-end percentiles)
for p50 and a looser 15% for p99, whose n is smaller. Where a target is missed, `step_terms`
says where the time went: in decode-only steps, in steps with prefill, or on the host between
steps (which the simulator does not count).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from workbench.runs.run_log import RunLog

# (preset, variant): workloads the calibration never saw.
HELD_OUT = (("chat-burst", None), ("sharegpt-chat", None), ("kv-pressure", None), ("azure-conv", "bundled"))
FIGURES = {  # metric -> the class its error is summarised in
    "ttft_p50_ms": "p50",
    "tpot_p50_ms": "p50",
    "ttft_p99_ms": "p99",
    "tpot_p99_ms": "p99",
    "output_tok_s": "throughput",
}
TARGET_PERC = {"p50": 9.0, "p99": 15.0}


def held_out_name(preset: str, variant: str | None) -> str:
    return f"{preset}-{variant}" if variant else preset


@dataclass(frozen=True)
class FigureError:
    workload: str
    metric: str
    real: float | None
    simulated: float | None
    n: int  # requests behind the real figure

    @property
    def error_perc(self) -> float | None:
        if self.real is None or self.simulated is None or self.real == 0:
            return None
        return 100.0 * (self.simulated / self.real - 1.0)


def figure_errors(workload: str, real: dict, simulated: dict) -> list[FigureError]:
    """The headline figures of a real run's report and its simulated replay's."""
    errors = []
    for metric in FIGURES:
        real_metric, simulated_metric = real["metrics"][metric], simulated["metrics"][metric]
        errors.append(FigureError(workload, metric, real_metric["value"], simulated_metric["value"], real_metric["n"]))
    return errors


@dataclass(frozen=True)
class Summary:
    kind: str  # "p50", "p99" or "throughput"
    median_abs_error_perc: float | None
    figures: int
    target_perc: float | None

    @property
    def met(self) -> bool | None:
        if self.target_perc is None or self.median_abs_error_perc is None:
            return None
        return self.median_abs_error_perc <= self.target_perc


def summarise(errors: list[FigureError]) -> list[Summary]:
    summaries = []
    for kind in dict.fromkeys(FIGURES.values()):
        values = [
            abs(error.error_perc) for error in errors if FIGURES[error.metric] == kind and error.error_perc is not None
        ]
        median = statistics.median(values) if values else None
        summaries.append(Summary(kind, median, len(values), TARGET_PERC.get(kind)))
    return summaries


@dataclass(frozen=True)
class StepTerm:
    """Where a run's engine time went: seconds and steps of one kind."""

    name: str
    real_s: float
    real_steps: int
    simulated_s: float
    simulated_steps: int

    @property
    def error_perc(self) -> float | None:
        return 100.0 * (self.simulated_s / self.real_s - 1.0) if self.real_s else None


def _time_by_kind(log: RunLog) -> dict[str, tuple[float, int]]:
    """Seconds and steps in decode-only steps, in steps with prefill, and between steps while
    requests were in flight (the host's time outside `step()`: the runner, the log)."""
    totals = {
        "decode-only steps": [0.0, 0],
        "steps with prefill": [0.0, 0],
        "between steps, requests in flight": [0.0, 0],
    }
    previous_end, in_flight = None, False
    for step in log.steps:
        kind = "steps with prefill" if step["prefill_tokens"] else "decode-only steps"
        totals[kind][0] += step["step_duration_s"]
        totals[kind][1] += 1
        start = step["time_s"] - step["step_duration_s"]
        if previous_end is not None and in_flight:
            totals["between steps, requests in flight"][0] += max(start - previous_end, 0.0)
            totals["between steps, requests in flight"][1] += 1
        previous_end = step["time_s"]
        in_flight = bool(step["num_running"] or step["num_waiting"] or step["num_waiting_long"])
    return {name: (seconds, count) for name, (seconds, count) in totals.items()}


def step_terms(real: RunLog, simulated: RunLog) -> list[StepTerm]:
    real_times, simulated_times = _time_by_kind(real), _time_by_kind(simulated)
    return [StepTerm(name, *real_times[name], *simulated_times[name]) for name in real_times]


def _number(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.1f}{unit}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}%"


def format_fidelity(errors: list[FigureError], terms: dict[str, list[StepTerm]], summaries: list[Summary]) -> str:
    """The table docs/memory.md shows, in Markdown."""
    lines = [
        "| workload | figure | real | simulated | error | n |",
        "|---|---|---|---|---|---|",
    ]
    for error in errors:
        lines.append(
            f"| {error.workload} | {error.metric} | {_number(error.real)} | {_number(error.simulated)} | "
            f"{_signed(error.error_perc)} | {error.n} |"
        )
    lines += ["", "| figures | median abs. error | of | target | met |", "|---|---|---|---|---|"]
    for summary in summaries:
        target = "—" if summary.target_perc is None else f"≤ {summary.target_perc:g}%"
        met = {True: "yes", False: "no", None: "—"}[summary.met]
        lines.append(
            f"| {summary.kind} | {_number(summary.median_abs_error_perc, '%')} | {summary.figures} | {target} | {met} |"
        )
    lines += [
        "",
        "| workload | where the time went | real s (steps) | simulated s (steps) | error |",
        "|---|---|---|---|---|",
    ]
    for workload, workload_terms in terms.items():
        for term in workload_terms:
            lines.append(
                f"| {workload} | {term.name} | {term.real_s:,.2f} ({term.real_steps}) | "
                f"{term.simulated_s:,.2f} ({term.simulated_steps}) | {_signed(term.error_perc)} |"
            )
    return "\n".join(lines)
