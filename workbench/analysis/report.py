"""Turn a run log into the run's report: every number with its unit and its n.

`build_report` reads only the log, so a finished run and a crashed one (a log without footer)
are reported by the same code. A run is `"complete"` when its log was closed cleanly and every
planned request was sent and ended; otherwise `"incomplete_because"` says what is missing.

Denominators: latency percentiles cover finished requests (stop or length) only; goodput counts
every request that arrived (rejected, aborted and unfinished ones are misses); output tok/s counts
every token generated, aborted and unfinished requests' included. `notes` in the report says so.

Metric names carry their unit (`ttft_p99_ms`, `output_tok_s`); per-tag figures are prefixed with
the tag (`chat/ttft_p99_ms`); the engine's memory is under `memory/` and quality scores (added
by workbench/analysis/quality_terms.py) under `quality/`. Each entry is {"value", "unit", "n", "interval"},
n being the number of requests (or steps) behind the value.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

from engine.requests.metrics import FINISHED_REASONS, UNFINISHED, RequestMetrics, StepStats, percentiles
from engine.requests.sequence import StopCause
from workbench.analysis.explain import explain, explanation_record
from workbench.analysis.intervals import PAIR_LEVEL, Interval, percentile_interval, rate_interval, share_interval
from workbench.runs.run_log import RunLog, request_metrics, step_stats
from workbench.traffic.scenario import SLO

LATENCIES = {  # report name -> how to read it from RequestMetrics
    "ttft": lambda metrics: [metrics.ttft_ms],
    "tpot": lambda metrics: [metrics.tpot_ms],
    "itl": lambda metrics: metrics.itl_ms,
    "e2e": lambda metrics: [metrics.e2e_ms],
    "queue_time": lambda metrics: [metrics.queue_time_ms],
}
REQUEST_COLUMNS = (
    ["request_id", "tag"]
    + [field.name for field in dataclasses.fields(RequestMetrics)]
    + [
        "queue_time_ms",
        "ttft_ms",
        "tpot_ms",
        "e2e_ms",
    ]
)


NOT_EXPOSED = "not exposed by this backend"
# Metrics read from the server's state, by the backend capability they need (workbench/backends/protocol.py).
SERVER_STATE_METRICS = {
    "kv_cache": ("kv_usage_peak_perc", "kv_usage_mean_perc"),
    "preemptions": ("preemptions",),
    "prefix_cache": ("prefix_cache_hit_perc",),
    "batch_composition": ("prefill_tok_s",),
}

MEMORY_PREFIX = "memory/"
# Report name -> (the run header's engine field, its unit): what the engine's memory holds.
MEMORY_METRICS = {
    "weights_mib": ("weight_bytes", "MiB of weights, every part"),
    "kv_cache_mib": ("kv_cache_bytes", "MiB of KV cache allocated"),
    "kv_capacity_tokens": ("kv_capacity_tokens", "tokens the KV cache holds"),
}
QUALITY_PREFIX = "quality/"  # figures workbench/analysis/quality_terms.py adds
# Figures of the configuration rather than of a tag's requests: a name under these is no subgroup.
CONFIGURATION_PREFIXES = (MEMORY_PREFIX, QUALITY_PREFIX)

NOTES = {
    "latency": "ttft, tpot, itl, e2e and queue_time cover finished requests (stop or length) only",
    "goodput": "requests meeting every SLO over every request that arrived: rejected, aborted, failed and unfinished "
    "ones count as misses",
    "output_tok_s": "every output token generated, aborted and unfinished requests' included",
    "requests_not_sent": "planned requests the run ended before sending; they did not arrive and are in no other "
    "figure",
    "requests_ended_early": "requests that produced fewer tokens than the max_tokens their traffic planned, over the "
    "requests whose plan the log keeps; ended_early_by_reason says why (end-of-sequence, a stop string, a full "
    "context, rejected, aborted, unfinished)",
    "interval": "95% within the run, each with its method and n: latency percentiles by order statistics "
    "(distribution-free; a side that n requests cannot bound is null, e.g. the p99 of fewer than 368), goodput by "
    "Clopper-Pearson, output_tok_s by batch means over 10 time blocks (how steady the run was: error bars, not a "
    "comparison's interval). pair_interval is a percentile's 97.5% interval, two of which bound a change between a "
    "pair of runs at 95%. Means, itl (its values cluster by request) and other run-wide figures (KV usage) have none "
    "within one run: `workbench bench --repeat N` gives every figure's across runs",
    "memory": "memory/ figures are the engine's own accounting of what it allocated (n = 1 engine); no run-to-run "
    "noise moves them, so their interval has zero width",
}


def memory_metrics(engine: dict) -> dict:
    """The engine's weights and KV cache in the report (a server that does not say has none)."""
    metrics = {}
    for name, (field, unit) in MEMORY_METRICS.items():
        value = engine.get(field)
        if isinstance(value, (int, float)):
            value = value / 2**20 if field.endswith("_bytes") else value
            metrics[MEMORY_PREFIX + name] = _metric(value, unit, 1, Interval.exact(value, "the engine's allocation"))
    return metrics


def _metric(
    value: float | None, unit: str, n: int, interval: Interval | None = None, pair_interval: Interval | None = None
) -> dict:
    """One figure: its value, unit, n, and its 95% interval within the run where it has one
    (workbench/analysis/intervals.py: {"low", "high", "standard_error", "method"}), else null; a
    percentile also its PAIR_LEVEL interval, what a comparison of one pair of runs combines."""
    entry = {"value": value, "unit": unit, "n": n, "interval": None if interval is None else interval.as_dict()}
    if pair_interval is not None:
        entry["pair_interval"] = pair_interval.as_dict()
    return entry


_PERCENTILES = {"p50": 50, "p90": 90, "p99": 99}


def latency_metrics(requests: list[RequestMetrics], slo: SLO, duration_s: float, prefix: str = "") -> dict:
    """Latency percentiles of the finished requests, and goodput over all of them."""
    finished = [metrics for metrics in requests if metrics.finish_reason in FINISHED_REASONS]
    out = {}
    for name, read in LATENCIES.items():
        values = [value for metrics in finished for value in read(metrics)]
        stats = percentiles(values)
        unit = "ms/token" if name == "tpot" else "ms"
        present = [value for value in values if value is not None]
        out[f"{prefix}{name}_mean_ms"] = _metric(stats.mean, unit, stats.n)
        for statistic, q in _PERCENTILES.items():
            # Inter-token latencies cluster by request: intervals over them one by one would be
            # narrower than the evidence, so they have none (notes).
            intervals = (
                (None, None)
                if name == "itl"
                else (percentile_interval(present, q), percentile_interval(present, q, PAIR_LEVEL))
            )
            out[f"{prefix}{name}_{statistic}_ms"] = _metric(getattr(stats, statistic), unit, stats.n, *intervals)
    meeting = sum(1 for metrics in finished if slo.met_by(metrics))
    goodput = 100.0 * meeting / len(requests) if requests else None
    # The count is a metric of its own, not part of the unit: a comparison shows one unit for both runs.
    out[f"{prefix}goodput_perc"] = _metric(
        goodput, "% of arrived requests meeting every SLO", len(requests), share_interval(meeting, len(requests))
    )
    out[f"{prefix}requests_meeting_slo"] = _metric(meeting, "requests meeting every SLO", len(requests))
    out[f"{prefix}goodput_req_s"] = _metric(
        meeting / duration_s if duration_s > 0 else None, "requests meeting every SLO per second", len(requests)
    )
    return out


def build_report(log: RunLog) -> dict:
    header = log.header
    start = header["start_time"]
    slo = SLO(**header["scenario"]["slo"])
    requests = [request_metrics(record) for record in log.requests]
    tags = [record["tag"] for record in log.requests]
    steps = [step_stats(record) for record in log.steps]
    last_time = steps[-1].time_s if steps else start
    duration = log.footer["duration_s"] if log.complete else last_time - start

    finished = [metrics for metrics in requests if metrics.finish_reason in FINISHED_REASONS]
    unfinished = _count(requests, UNFINISHED)
    planned, not_sent = _planned_and_not_sent(log)
    not_exposed = header.get("backend", {}).get("not_exposed", [])  # run logs before backends: the engine, all exposed
    output_tokens = sum(metrics.num_output_tokens for metrics in requests)
    prompt_tokens = sum(metrics.num_prompt_tokens for metrics in finished)
    prefill_tokens = sum(step.prefill_tokens for step in steps)
    per_second = (lambda count: count / duration) if duration > 0 else (lambda count: None)
    kv_usage = [step.kv_usage_perc for step in steps]
    last = steps[-1] if steps else None
    proposed, accepted = sum(step.proposed_tokens for step in steps), sum(step.accepted_tokens for step in steps)

    metrics = {
        "duration_s": _metric(duration, "s", len(steps)),
        "request_throughput_req_s": _metric(per_second(len(finished)), "finished requests/s", len(finished)),
        "output_tok_s": _metric(
            per_second(output_tokens),
            "output tokens/s (all generated, see notes)",
            len(requests),
            rate_interval([time for record in log.requests for time in record["token_times"]], start, duration),
        ),
        "prompt_tok_s": _metric(per_second(prompt_tokens), "prompt tokens of finished requests/s", len(finished)),
        "prefill_tok_s": _metric(per_second(prefill_tokens), "prefilled tokens/s (recomputes included)", len(steps)),
        **latency_metrics(requests, slo, duration),
        "requests_finished": _metric(len(finished), "requests", len(requests)),
        "requests_rejected": _metric(_count(requests, "rejected"), "requests", len(requests)),
        "requests_aborted": _metric(_count(requests, "abort"), "requests", len(requests)),
        "requests_failed": _metric(
            _count(requests, "error"), "requests the server or the network failed", len(requests)
        ),
        "requests_unfinished": _metric(
            unfinished, "requests still waiting or running when the run ended", len(requests)
        ),
        "requests_not_sent": _metric(not_sent, "planned requests never sent", planned),
        "preemptions": _metric(last.preemptions_total if last else 0, "events", len(steps)),
        # Speculative decoding: the proposed tokens the model agreed with (none proposed: no figure).
        "spec_decode_acceptance_perc": _metric(
            100.0 * accepted / proposed if proposed else None, "% of proposed tokens accepted", proposed
        ),
        "kv_usage_peak_perc": _metric(max(kv_usage, default=None), "% of KV blocks", len(steps)),
        "kv_usage_mean_perc": _metric(
            sum(kv_usage) / len(kv_usage) if kv_usage else None, "% of KV blocks", len(steps)
        ),
        "prefix_cache_hit_perc": _metric(
            100.0 * last.prefix_cache_hit_tokens_total / last.prefix_cache_query_tokens_total
            if last and last.prefix_cache_query_tokens_total
            else None,
            "% of prompt tokens served from the prefix cache",
            last.prefix_cache_query_tokens_total if last else 0,
        ),
    }
    beside = [step for step in steps if step.beside_compile]
    metrics["steps_beside_compile"] = _metric(
        len(beside), "steps run eagerly beside the decode graph's compile", len(steps)
    )
    metrics.update(memory_metrics(header["engine"]))
    if (log.footer or {}).get("sessions_cut_by_context") is not None:
        metrics["sessions_cut_by_context"] = _metric(
            log.footer["sessions_cut_by_context"],
            "sessions ended early: their next prompt would not fit",
            log.footer.get("sessions_started"),  # n in sessions (logs before it: unknown)
        )
    early = ended_early(log.requests)
    metrics["requests_ended_early"] = (
        _metric(None, "requests: the log keeps no plans (written before December 2026)", 0)
        if early is None
        else _metric(
            sum(early.values()), "requests that produced fewer tokens than their max_tokens", _planned_count(log)
        )
    )
    if header.get("trace_replay"):
        replay = header["trace_replay"]
        metrics["requests_clipped"] = _metric(
            replay["clipped"], f"requests cut to the context of {replay['max_model_len']} tokens", replay["requests"]
        )
    for capability, names in SERVER_STATE_METRICS.items():
        if capability in not_exposed:
            metrics.update({name: _metric(None, NOT_EXPOSED, 0) for name in names})
    for tag in sorted(set(tags)):
        tagged = [metrics for metrics, request_tag in zip(requests, tags) if request_tag == tag]
        metrics.update(latency_metrics(tagged, slo, duration, prefix=f"{tag}/"))
    incomplete_because = incomplete_reasons(log)
    footer = log.footer or {}
    return {
        "schema": "workbench-report/4",
        "complete": not incomplete_because,
        "incomplete_because": incomplete_because,
        "stopped_early": bool(log.footer and log.footer.get("stopped_early")),
        "scenario": header["scenario"],
        "variant": header.get("variant"),
        "seed": header.get("seed"),
        "slo": header["scenario"]["slo"],
        "versions": header["versions"],
        "engine": header["engine"],
        "requests_planned": planned,
        "backend": header.get("backend", {"name": "in-process engine", "not_exposed": []}),
        # The machine's speed before the first request and after the last (headless runs).
        "machine_probe": {
            moment: probe
            for moment, probe in (("start", header.get("machine_probe")), ("end", footer.get("machine_probe")))
            if probe
        },
        "metrics": metrics,
        # A simulated GPU's figures are worth what published runs near this run's settings measured
        # (presets/published/errors.toml, by region: the stack, TP, multi-step, chunked prefill,
        # load): their median error per kind of figure, or "unchecked" where none is near.
        **({"simulated_error": simulated_error(header, steps)} if "serving_stack" in header["engine"] else {}),
        "beside_compile": beside_compile_caution(beside, len(steps), requests, start),
        "ended_early_by_reason": early,
        # Why the tail waited (workbench/analysis/explain.py): only where the trace lines were read.
        **({"explain": explanation_record(explain(log))} if log.traces_read else {}),
        "notes": NOTES,
    }


def ended_early(records: list[dict]) -> dict[str, int] | None:
    """The requests whose plan is logged that produced fewer tokens than their max_tokens ("asked
    for N, got M"), counted by why they ended: the finish reason and, for stop and length, what
    stopped them (end-of-sequence token, stop string, a full context). None for a log without
    plans."""
    counts: dict[str, int] = {}
    planned = [record for record in records if "planned" in record]
    if not planned:
        return None
    for record in planned:
        if len(record["token_times"]) < record["planned"]["max_tokens"]:
            why = _early_reason(record["finish_reason"], record.get("stop_cause"), record.get("finish_detail", ""))
            counts[why] = counts.get(why, 0) + 1
    return dict(sorted(counts.items()))


def _early_reason(reason: str, cause: str | None, detail: str) -> str:
    """The finish reason with, for stop and length, its typed cause. A log written before the
    cause was recorded names it only in the detail's first words ("stop string 'x'", "max_tokens
    (64)"), each of which begins with a cause's label."""
    if reason not in ("stop", "length"):
        return reason
    if cause is None:
        cause = next((known.value for known in StopCause if detail.startswith(known.value)), None)
    return f"{reason}: {cause}" if cause else reason


def _planned_count(log: RunLog) -> int:
    return sum("planned" in record for record in log.requests)


def beside_compile_caution(
    beside: list[StepStats], num_steps: int, requests: list[RequestMetrics], start: float
) -> str | None:
    """What a run that began during the warm-up must say with its figures (None for one that did
    not): its first steps ran eagerly beside the decode graph's compile, so the latencies of the
    requests that arrived meanwhile measure the warm-up, not the engine."""
    if not beside:
        return None
    until = beside[-1].time_s
    touched = sum(1 for metrics in requests if metrics.arrival_time <= until)
    return (
        f"{len(beside)} of {num_steps} steps (from {beside[0].time_s - beside[0].step_duration_s - start:.1f} s to "
        f"{until - start:.1f} s) ran eagerly beside the decode graph's compile: the latencies of the "
        f"{touched} of {len(requests)} requests that arrived by then measure the warm-up, not the compiled engine"
    )


def _planned_and_not_sent(log: RunLog) -> tuple[int | None, int | None]:
    """(requests planned, planned requests never sent); None where the log cannot say. Without a
    footer nobody knows which of the requests not logged were sent: they are counted as not sent
    (unknown when the number planned was: traffic that ends by a duration)."""
    planned = log.header.get("requests_planned")
    if log.complete:
        not_sent = log.footer.get("requests_not_sent", 0)  # None: saved mid-run, traffic by duration still arriving
        if planned is None and not_sent is not None:
            planned = len(log.requests) + not_sent  # every request sent is in a complete log
        return planned, not_sent
    return planned, None if planned is None else max(0, planned - len(log.requests))


def incomplete_reasons(log: RunLog) -> list[str]:
    """Why a run is incomplete, none when it is complete: one definition for report.json's
    `complete` and the window's opened run (a run saved mid-run has a footer, and is incomplete)."""
    unfinished = sum(1 for record in log.requests if record.get("finish_reason") == UNFINISHED)
    not_sent = _planned_and_not_sent(log)[1]
    footer = log.footer or {}
    return [
        reason
        for reason, applies in (
            ("the run log was not closed (crash or interruption)", not log.complete),
            (f"requests still in flight when the run ended: {unfinished}", unfinished),
            (f"planned requests never sent: {not_sent}", not_sent),
            (f"stopped before its traffic ended ({footer.get('stopped_by')})", footer.get("stopped_by")),
            ("saved while the run was going (requests in flight or still to send)", footer.get("saved_mid_run")),
            *((problem, True) for problem in footer.get("problems", [])),
            (log.skipped_summary(), log.skipped_lines),
        )
        if applies
    ]


def _count(requests: list[RequestMetrics], reason: str) -> int:
    return sum(1 for metrics in requests if metrics.finish_reason == reason)


def simulated_error(header: dict, steps: list[StepStats]) -> dict[str, dict]:
    """Per kind of figure (TTFT, per-token latency, throughput): the error stated for the region
    the run stood in: its engine's settings (the scenario's, with the stack the engine resolved
    `auto` to) and the load its steps show."""
    from engine import EngineConfig
    from workbench.analysis.stated_error import FIGURE_KINDS, Region, load_of, stated_error

    settings = {**header["scenario"].get("engine", {}), "serving_stack": header["engine"]["serving_stack"]}
    region = Region.of(settings, load_of(steps, settings.get("max_num_seqs", EngineConfig().max_num_seqs)))
    return {kind: stated_error(region, kind).report_entry() for kind in FIGURE_KINDS}


def write_report_files(log: RunLog, out_dir: Path) -> dict:
    """report.json, requests.csv and steps.csv in out_dir; returns the report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = build_report(log)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    with (out_dir / "requests.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=REQUEST_COLUMNS)
        writer.writeheader()
        for record in log.requests:
            metrics = request_metrics(record)
            row = {**record, "token_times": json.dumps(record["token_times"])}
            row.update(
                queue_time_ms=metrics.queue_time_ms,
                ttft_ms=metrics.ttft_ms,
                tpot_ms=metrics.tpot_ms,
                e2e_ms=metrics.e2e_ms,
            )
            writer.writerow({column: row.get(column) for column in REQUEST_COLUMNS})
    step_columns = ["time_since_start_s"] + [field.name for field in dataclasses.fields(StepStats)]
    with (out_dir / "steps.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=step_columns, extrasaction="ignore")  # a newer log's keys
        writer.writeheader()
        for record in log.steps:
            writer.writerow({"time_since_start_s": record["time_s"] - log.header["start_time"], **record})
    return report
