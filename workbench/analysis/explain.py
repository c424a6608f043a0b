"""Why the tail waited: every finished request's time from arrival to its last token, split into
causes read from the run's step traces.

Each step k of the engine covers the time from the end of step k-1 to its own end (the gap
between steps included). For a request in that time:
  - waiting in a queue, before its first admission: the reason its queue's head was not admitted
    in step k (everyone behind the head waits with it): a sequence slot (max_num_seqs), the
    step's token budget, free KV blocks, the long-prompt policy (max_long_prefills, an overdue long
    prompt first), or another reason the trace names;
  - arrived while step k was already running: it waits for that step to end ("mid-step");
  - scheduled in step k: prefill (each chunk) or decode; recomputing after a preemption, and the
    wait before it, count as "preempted";
  - running but left out of step k (a full trace lists every row): "left out of a step".
Summary traces (after the first 10,000 steps by default) list prefill rows but only count decode
rows: a running request's step with no prefill row is counted as decode there.

Without step traces (a server's run, or engine.step_trace off) only the request's own times are
known: arrival, first scheduled (the in-process engine), first token, last token. Then waiting is
one cause "waiting (no step traces)", and for a server everything before the first token is
"at the server before the first token", which the server's queueing and its prefill share.
A request of a disaggregated deployment (engine/deployment.py, whose instances keep no
step traces) has five: waiting for a prefill instance, prefill, its K/V's transfer (waiting for
the link included), waiting for a decode instance, and decode.

The per-step reasons are accumulated once per queue and cause (`_QueueReasons`), so a request's
wait costs a subtraction, not a pass over the steps it waited through.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from engine.requests.metrics import FINISHED_REASONS, UNFINISHED
from engine.requests.step_trace import WAITING, WAITING_LONG
from workbench.analysis.speculation_effect import SpeculationSummary, summarise_speculation
from workbench.runs.run_log import RunLog
from workbench.step_traces.log import read_trace
from workbench.step_traces.text import format_request

# Cause keys in the order shown, with what each means to a reader.
CAUSES = {
    "mid_step": "arrived during a step, waited for it to end",
    "max_num_seqs": "waiting for a sequence slot (max_num_seqs)",
    "token_budget": "waiting for the step's token budget",
    "kv_blocks": "waiting for free KV blocks",
    "long_prompt_policy": "held by the long-prompt policy",
    "other_wait": "waiting, another reason",
    "prefill": "prefill",
    "left_out": "running, left out of a step",
    "decode": "decode",
    "preempted": "preempted: waiting again and recomputing",
    "waiting_untraced": "waiting (no step traces)",
    "prefill_instance_wait": "waiting for a prefill instance (disaggregated)",
    "kv_transfer": "K/V sent to a decode instance (link waits included)",
    "decode_instance_wait": "waiting for a decode instance (disaggregated)",
    "server_before_first_token": "at the server before the first token (its queue and prefill)",
}
_INDEX = {cause: index for index, cause in enumerate(CAUSES)}
# What a run without step traces cannot split, in a report's words.
NOT_ATTRIBUTABLE_ON_A_SERVER = (
    "a server's run has no step traces: its queueing and prefill are one figure (time to first "
    "token), and slot, token-budget, KV-block, long-prompt and preemption waits cannot be told apart"
)
NOT_ATTRIBUTABLE_UNTRACED = (
    "recorded without step traces: waiting is one figure (arrival to first scheduled); its reasons "
    "(slot, token budget, KV blocks, long-prompt policy, preemption) cannot be told apart"
)


def cause_of(reason: str) -> str:
    """The cause a step trace's reason for a held queue head names."""
    if reason.startswith("max_num_seqs"):
        return "max_num_seqs"
    if reason.startswith(("the step's token budget", "the whole prompt does not fit")):
        return "token_budget"
    if reason.startswith(("not enough free KV blocks", "a running request was preempted")):
        return "kv_blocks"
    if reason.startswith(("max_long_prefills", "the overdue long prompt")):
        return "long_prompt_policy"
    return "other_wait"


@dataclass
class RequestTime:
    request_id: str
    tag: str
    e2e_s: float  # arrival to last token
    seconds: np.ndarray = field(default_factory=lambda: np.zeros(len(CAUSES)))  # per cause, in CAUSES order

    def add(self, cause: str, seconds: float) -> None:
        self.seconds[_INDEX[cause]] += seconds

    def main_cause(self) -> str:
        return list(CAUSES)[int(np.argmax(self.seconds))]

    def main_cause_perc(self) -> float:
        """The main cause's share of the request's time, %."""
        total = self.seconds.sum()
        return 100.0 * self.seconds.max() / total if total else 0.0


class _QueueReasons:
    """Per queue, the time each cause held it, accumulated over the steps: a request that waited in
    a queue from step a to step b (inclusive) waited `between(queue, a, b)`."""

    def __init__(self, steps: list[dict], lengths: np.ndarray):
        self._steps = steps
        self._cumulative = {}
        for queue in (WAITING, WAITING_LONG):
            per_step = np.zeros((len(steps) + 1, len(CAUSES)))
            for index in range(len(steps)):
                per_step[index + 1, _INDEX[self.cause_at(queue, index)]] = lengths[index]
            self._cumulative[queue] = np.cumsum(per_step, axis=0)

    def cause_at(self, queue: str, step: int) -> str:
        """Why the queue's head waited in this step (no held head while a request waited: it
        arrived during the step, which is counted apart)."""
        reason = next((held[2] for held in self._steps[step]["held"] if held[1] == queue), None)
        return cause_of(reason) if reason else "other_wait"

    def between(self, queue: str, first: int, last: int) -> np.ndarray:
        if last < first:
            return np.zeros(len(CAUSES))
        table = self._cumulative[queue]
        return table[last + 1] - table[first]


@dataclass
class _Waiting:
    since: int  # the first step it waited through in its queue
    partial: tuple[int, float] | None  # (step, seconds): a first step it waited only part of
    preempted: bool


@dataclass
class _Running:
    since: int  # the step that admitted it (its time is counted apart)
    full_rows_s: float = 0.0  # time of later steps with a row for it, full traces
    summary_rows_s: float = 0.0  # the same, summary traces (prefill rows only)


def attribute_traced(log: RunLog) -> list[RequestTime]:
    """Every finished request's time split into causes, from the step traces."""
    steps = log.traces
    ends = np.array([step["time_s"] for step in steps])
    starts = ends - np.array([step["execute_s"] + step["other_s"] for step in steps])
    previous_ends = np.concatenate(([min(starts[0], log.header["start_time"])], ends[:-1]))
    lengths = ends - previous_ends
    full = np.array([bool(step["full"]) for step in steps])
    full_time = np.concatenate(([0.0], np.cumsum(np.where(full, lengths, 0.0))))
    reasons = _QueueReasons(steps, lengths)

    records = {record["request_id"]: record for record in log.requests}
    times = {
        request_id: RequestTime(request_id, record["tag"], record["finish_time"] - record["arrival_time"])
        for request_id, record in records.items()
        if record["finish_reason"] in FINISHED_REASONS
    }
    arrivals = sorted((record["arrival_time"], request_id) for request_id, record in records.items())
    waiting: dict[str, _Waiting] = {}
    running: dict[str, _Running] = {}
    next_arrival = 0

    def stop_running(request_id: str, last_step: int) -> None:
        """Its time in steps after its admission step, up to `last_step`: rows counted, the rest
        decode (summary steps) or left out (full steps)."""
        state = running.pop(request_id)
        time = times.get(request_id)
        if time is None or last_step <= state.since:
            return
        span = ends[last_step] - ends[state.since]
        full_span = full_time[last_step + 1] - full_time[state.since + 1]
        time.add("left_out", max(0.0, full_span - state.full_rows_s))
        time.add("decode", max(0.0, (span - full_span) - state.summary_rows_s))

    for index, step in enumerate(steps):
        # Arrivals up to this step's end: in the queue when it scheduled, or arrived while it ran.
        while next_arrival < len(arrivals) and arrivals[next_arrival][0] <= ends[index]:
            arrival, request_id = arrivals[next_arrival]
            next_arrival += 1
            if arrival <= starts[index]:
                waiting[request_id] = _Waiting(
                    index + 1, (index, ends[index] - max(arrival, previous_ends[index])), False
                )
            else:
                if request_id in times:
                    times[request_id].add("mid_step", ends[index] - arrival)
                waiting[request_id] = _Waiting(index + 1, None, False)
        for victim, _ in step["preemptions"]:
            if victim in running:
                stop_running(victim, index - 1)
                waiting[victim] = _Waiting(index, None, True)
        for request_id, kind, _, _, _, admitted_from, recompute in step["rows"]:
            time = times.get(request_id)
            if admitted_from is not None:
                state = waiting.pop(request_id, None)
                if time is not None and state is not None:
                    _count_wait(time, state, admitted_from, index, reasons)
                    arrival = records[request_id]["arrival_time"]
                    cause = "preempted" if recompute else "prefill"
                    time.add(cause, ends[index] - max(arrival, previous_ends[index]))
                running[request_id] = _Running(index)
                continue
            state = running.get(request_id)
            if state is None:
                continue
            if time is not None:
                time.add("preempted" if recompute else kind, lengths[index])
            if full[index]:
                state.full_rows_s += lengths[index]
            else:
                state.summary_rows_s += lengths[index]
        for request_id, _, finish_reason, _ in step["emitted"]:
            if finish_reason and request_id in running:
                stop_running(request_id, index)
    return list(times.values())


def _count_wait(time: RequestTime, state: _Waiting, queue: str, admitted_at: int, reasons: _QueueReasons) -> None:
    """A wait that ended with admission from `queue` in step `admitted_at`."""
    waited = reasons.between(queue, state.since, admitted_at - 1)
    if state.partial is not None:
        step, seconds = state.partial
        if step < admitted_at:  # waited part of its arrival step; admitted in it, it is prefill
            waited = waited.copy()
            waited[_INDEX[reasons.cause_at(queue, step)]] += seconds
    if state.preempted:
        time.add("preempted", float(waited.sum()))
    else:
        time.seconds += waited


def attribute_untraced(log: RunLog, on_a_server: bool) -> list[RequestTime]:
    """Every finished request's time from its own timestamps only (module docstring)."""
    times = []
    for record in log.requests:
        if record["finish_reason"] not in FINISHED_REASONS:
            continue
        arrival, first_token, finish = record["arrival_time"], record["first_token_time"], record["finish_time"]
        time = RequestTime(record["request_id"], record["tag"], finish - arrival)
        scheduled = record.get("first_scheduled_time")
        if record.get("kv_ready_time") is not None:  # prefilled on one instance, decoded on another
            decode_scheduled = record["decode_scheduled_time"]
            time.add("prefill_instance_wait", scheduled - arrival)
            time.add("prefill", first_token - scheduled)
            time.add("kv_transfer", record["kv_ready_time"] - first_token)
            time.add("decode_instance_wait", decode_scheduled - record["kv_ready_time"])
            time.add("decode", finish - decode_scheduled)
            times.append(time)
            continue
        if on_a_server or scheduled is None:
            time.add("server_before_first_token", first_token - arrival)
        else:
            time.add("waiting_untraced", scheduled - arrival)
            time.add("prefill", first_token - scheduled)
        time.add("decode", finish - first_token)
        times.append(time)
    return times


@dataclass
class GroupShares:
    n: int
    e2e_mean_ms: float | None
    share_perc: dict[str, float]  # of the group's total time, per cause
    mean_ms: dict[str, float]  # per request of the group, per cause


def group_shares(times: list[RequestTime]) -> GroupShares:
    if not times:
        return GroupShares(0, None, {}, {})
    table = np.array([time.seconds for time in times])
    totals = table.sum(axis=0)
    whole = totals.sum()
    shown = [cause for cause in CAUSES if totals[_INDEX[cause]] > 1e-6 * len(times)]  # not rounding residue
    return GroupShares(
        n=len(times),
        e2e_mean_ms=1000.0 * float(np.mean([time.e2e_s for time in times])),
        share_perc={cause: 100.0 * float(totals[_INDEX[cause]] / whole) if whole else 0.0 for cause in shown},
        mean_ms={cause: 1000.0 * float(totals[_INDEX[cause]]) / len(times) for cause in shown},
    )


@dataclass
class Explanation:
    above_percentile: float
    threshold_ms: float | None  # the e2e latency the tail is above
    tag: str | None
    tail: GroupShares
    everyone: GroupShares
    slowest: list[RequestTime]
    tail_times: list[RequestTime]  # every request of the tail
    traced: bool
    not_attributable: str | None  # what this run cannot split, or None
    arrived: int = 0  # requests that arrived (of the tag): everyone.n of them finished
    unfinished: int = 0  # of those, still in flight when the run ended (or was saved)
    speculation: SpeculationSummary | None = None  # what speculative decoding did; None: it did not run

    def left_out(self) -> str:
        """What the figures leave out, in words ("" when every request that arrived finished)."""
        missing = self.arrived - self.everyone.n
        if not missing:
            return ""
        text = f"{missing} of {self.arrived} requests that arrived did not finish and are left out"
        if self.unfinished:
            text += (
                f" ({self.unfinished} still in flight when the run ended: the slowest, likely, so this tail is the "
                "finished requests' tail, not the run's)"
            )
        return text


def explain(log: RunLog, above_percentile: float = 90.0, tag: str | None = None, slowest: int = 5) -> Explanation:
    """The causes of the requests at or above the percentile of end-to-end latency, next to everyone's.
    `log` must have been read with its traces (read_run_log(..., with_traces=True))."""
    backend = log.header.get("backend", {})
    on_a_server = "step_trace" in backend.get("not_exposed", []) and not backend.get("name", "").startswith(
        "in-process"
    )
    if log.traces:
        times, not_attributable = attribute_traced(log), None
    else:
        times = attribute_untraced(log, on_a_server)
        not_attributable = NOT_ATTRIBUTABLE_ON_A_SERVER if on_a_server else NOT_ATTRIBUTABLE_UNTRACED
    if tag is not None:
        times = [time for time in times if time.tag == tag]
    threshold = float(np.percentile([time.e2e_s for time in times], above_percentile)) if times else None
    tail = [time for time in times if threshold is not None and time.e2e_s >= threshold]
    tagged = [record for record in log.requests if tag is None or record["tag"] == tag]
    arrived = [record["finish_reason"] for record in tagged]
    return Explanation(
        above_percentile=above_percentile,
        threshold_ms=None if threshold is None else 1000.0 * threshold,
        tag=tag,
        tail=group_shares(tail),
        everyone=group_shares(times),
        slowest=sorted(times, key=lambda time: time.e2e_s, reverse=True)[:slowest],
        tail_times=tail,
        traced=bool(log.traces),
        not_attributable=not_attributable,
        arrived=len(arrived),
        unfinished=arrived.count(UNFINISHED),
        speculation=summarise_speculation(tagged),
    )


def explanation_record(explanation: Explanation) -> dict:
    """The report's "explain" section."""

    def group(shares: GroupShares) -> dict:
        return {
            "n": shares.n,
            "e2e_mean_ms": shares.e2e_mean_ms,
            "causes": {
                cause: {"share_perc": shares.share_perc[cause], "mean_ms": shares.mean_ms[cause]}
                for cause in shares.share_perc
            },
        }

    return {
        "measure": "time from arrival to the last token of finished requests, split by cause",
        "above_percentile": explanation.above_percentile,
        "threshold_ms": explanation.threshold_ms,
        "tag": explanation.tag,
        "traced": explanation.traced,
        "not_attributable": explanation.not_attributable,
        "tail": group(explanation.tail),
        "all": group(explanation.everyone),
        "arrived": explanation.arrived,
        "unfinished": explanation.unfinished,
        "left_out": explanation.left_out(),
        "slowest": [
            {"request_id": time.request_id, "e2e_ms": 1000.0 * time.e2e_s, "main_cause": time.main_cause()}
            for time in explanation.slowest
        ],
        "speculation": None
        if explanation.speculation is None
        else {
            "proposed_tokens": explanation.speculation.proposed,
            "accepted_tokens": explanation.speculation.accepted,
            "requests": [dataclasses.asdict(request) for request in explanation.speculation.requests],
        },
        "causes": CAUSES,
    }


def format_explanation(explanation: Explanation, title: str) -> str:
    """The table `workbench explain` prints."""
    above = f"p{explanation.above_percentile:g}"
    tail, everyone = explanation.tail, explanation.everyone
    if not everyone.n:
        return f"{title}: no finished request{' tagged ' + explanation.tag if explanation.tag else ''} to explain"
    lines = [
        f"{title}: why requests took their time (arrival to last token, finished requests"
        f"{', tag ' + explanation.tag if explanation.tag else ''})",
        f"tail: at or above {above} = {explanation.threshold_ms:,.0f} ms (n = {tail.n}); all: n = {everyone.n} "
        f"finished of {explanation.arrived} arrived",
        *([f"Left out: {explanation.left_out()}."] if explanation.left_out() else []),
        "",
        f"{'cause':<58} {'tail share':>10} {'tail mean':>11} {'all share':>10} {'all mean':>11}",
    ]
    for cause, meaning in CAUSES.items():
        if cause not in everyone.share_perc:
            continue
        lines.append(
            f"{meaning:<58} {tail.share_perc.get(cause, 0.0):>9.1f}% {tail.mean_ms.get(cause, 0.0):>8,.0f} ms"
            f" {everyone.share_perc[cause]:>9.1f}% {everyone.mean_ms[cause]:>8,.0f} ms"
        )
    lines.append(
        f"{'arrival to last token, mean':<58} {'':>10} {tail.e2e_mean_ms or 0:>8,.0f} ms {'':>10} "
        f"{everyone.e2e_mean_ms:>8,.0f} ms"
    )
    if explanation.not_attributable:
        lines += ["", f"Not attributable: {explanation.not_attributable}."]
    speculated = {}
    if explanation.speculation is not None:
        lines += ["", explanation.speculation.text()]
        speculated = {request.request_id: request for request in explanation.speculation.requests}
    lines += ["", "Slowest (their histories: workbench trace RUN --request ID):"]
    for time in explanation.slowest:
        share = 100.0 * time.seconds.max() / time.seconds.sum() if time.seconds.sum() else 0.0
        gain = speculated.get(time.request_id)
        lines.append(
            f"  {time.request_id:<16} {1000 * time.e2e_s:>10,.0f} ms  {CAUSES[time.main_cause()]} ({share:.0f}%)"
            + (
                f"; speculation: {gain.accepted} of {gain.proposed} proposed accepted, at most "
                f"{1000 * gain.saved_s:,.0f} ms saved"
                if gain is not None
                else ""
            )
        )
    return "\n".join(lines)


def request_history(log: RunLog, request_id: str) -> str:
    """`workbench trace --request`'s text for one request of a log read with its traces ("" when
    the log has none or no such request)."""
    record = next((record for record in log.requests if record["request_id"] == request_id), None)
    if record is None or not log.traces:
        return ""
    arrival, finish = record["arrival_time"], record["finish_time"] or float("inf")
    steps = [read_trace(step) for step in log.traces if arrival <= step["time_s"] <= finish + 1e-9]
    return format_request(steps, request_id, arrival, log.header["start_time"])
