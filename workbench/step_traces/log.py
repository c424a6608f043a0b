"""Step traces in the run log: one "trace" line per engine step, and back.

A line keeps the four parts of `StepTrace` (engine/requests/step_trace.py). Scalars are named; the
repeated entries (rows, block changes, preemptions, emitted tokens) are arrays whose columns the
run header lists under "trace_columns" (about 5 KB a step at 64 decode rows, docs/step-traces.md).

Two levels (the scenario's `trace` setting):
- "full": everything;
- "summary": decode rows, the tokens they emitted and their speculative proposals are counted,
  not listed (at steady state they are most of a line); prefill rows, every block change,
  preemptions and finishes stay, so the block map still replays and "why did this request wait /
  who took the blocks" still has an answer.
- "auto" (the default): full for the first FULL_TRACE_STEPS steps, summary after, so a long soak
  stays small. The footer says where it switched.
"""

from __future__ import annotations

from engine.errors import ConfigError
from engine.requests.step_trace import (
    BlockChange,
    Emitted,
    Held,
    KvState,
    Preemption,
    ScheduledRow,
    Speculation,
    StepTrace,
)

TRACE_LEVELS = ("auto", "full", "summary")
# Full lines average 5.2 KB a step at 64 decode rows, summaries 0.7 KB (benchmarks/trace_cost.py):
# a long soak's log grows by at most some 50 MB of full lines, then by a seventh of that.
FULL_TRACE_STEPS = 10_000

TRACE_COLUMNS = {
    "rows": ["request_id", "kind", "start", "end", "num_prompt_tokens", "admitted_from", "recompute"],
    "block_changes": ["request_id", "action", "block_ids", "free_list", "cause"],
    "held": ["request_id", "queue", "reason"],
    "preemptions": ["victim", "reason"],
    "emitted": ["request_id", "token_ids", "finish_reason", "finish_detail"],
    "kv": ["free_blocks", "cached_free_blocks", "used_blocks"],
    "speculation": ["request_id", "proposed", "accepted"],
}


def check_trace_level(level: str) -> str:
    if level not in TRACE_LEVELS:
        raise ConfigError(f"trace: expected one of {', '.join(TRACE_LEVELS)}, got {level!r}")
    return level


def trace_record(trace: StepTrace, full: bool) -> dict:
    """The run-log line of one step (without its "type")."""
    rows, emitted, speculation = trace.rows, trace.emitted, trace.speculation
    decodes_omitted, tokens_omitted = trace.decode_rows_omitted, trace.tokens_omitted  # a summary read back stays one
    if not full:
        rows = [row for row in trace.rows if row.kind != "decode"]
        decodes_omitted += len(trace.rows) - len(rows)
        decoded = {row.request_id for row in trace.rows if row.kind == "decode"}
        emitted = [entry for entry in trace.emitted if entry.finish_reason or entry.request_id not in decoded]
        speculation = []  # the step's StepStats keep its proposed and accepted totals
        tokens_omitted += sum(len(entry.token_ids) for entry in trace.emitted) - sum(
            len(entry.token_ids) for entry in emitted
        )
    return {
        "step": trace.step,
        "time_s": trace.time_s,
        "full": full and not trace.decode_rows_omitted and not trace.tokens_omitted,
        "waiting": trace.waiting,
        "waiting_long": trace.waiting_long,
        "running": trace.running,
        "token_budget": trace.token_budget,
        "kv_before": _kv(trace.kv_before),
        "released_before": [_change(change) for change in trace.released_before],
        "rows": [
            [row.request_id, row.kind, row.start, row.end, row.num_prompt_tokens, row.admitted_from, row.recompute]
            for row in rows
        ],
        "decode_rows_omitted": decodes_omitted,
        "held": [[held.request_id, held.queue, held.reason] for held in trace.held],
        "execute_s": trace.execute_s,
        "other_s": trace.other_s,
        "block_changes": [_change(change) for change in trace.block_changes],
        "registered": trace.registered,
        "preemptions": [[preemption.victim, preemption.reason] for preemption in trace.preemptions],
        "kv_after": _kv(trace.kv_after),
        "emitted": [[entry.request_id, entry.token_ids, entry.finish_reason, entry.finish_detail] for entry in emitted],
        "tokens_omitted": tokens_omitted,
        "speculation": [[record.request_id, record.proposed, record.accepted] for record in speculation],
    }


def read_trace(record: dict) -> StepTrace:
    """A logged trace line back as a `StepTrace` (a summary line lists only what it kept; its
    `decode_rows_omitted` and `tokens_omitted` say how much it counted instead)."""
    return StepTrace(
        step=record["step"],
        time_s=record["time_s"],
        waiting=record["waiting"],
        waiting_long=record["waiting_long"],
        running=record["running"],
        token_budget=record["token_budget"],
        kv_before=KvState(*record["kv_before"]),
        released_before=[BlockChange(*change) for change in record["released_before"]],
        rows=[ScheduledRow(*row) for row in record["rows"]],
        held=[Held(*held) for held in record["held"]],
        execute_s=record["execute_s"],
        other_s=record["other_s"],
        block_changes=[BlockChange(*change) for change in record["block_changes"]],
        registered=record["registered"],
        preemptions=[Preemption(*preemption) for preemption in record["preemptions"]],
        kv_after=KvState(*record["kv_after"]),
        emitted=[Emitted(*entry) for entry in record["emitted"]],
        decode_rows_omitted=record["decode_rows_omitted"],
        tokens_omitted=record["tokens_omitted"],
        speculation=[Speculation(*entry) for entry in record.get("speculation", [])],  # none before speculation
    )


def _kv(state: KvState) -> list[int]:
    return [state.free_blocks, state.cached_free_blocks, state.used_blocks]


def _change(change: BlockChange) -> list:
    return [change.request_id, change.action, change.block_ids, change.free_list, change.cause, change.window_blocks]


def why_no_traces(header: dict) -> str:
    """Why a run log holds no step traces, from its header: the configuration turned them off, the
    backend keeps none (a server), or the log predates them."""
    backend = header.get("backend", {})
    if (header.get("scenario") or {}).get("engine", {}).get("step_trace") is False and backend.get(
        "name"
    ) == "in-process engine":
        return "recorded with engine.step_trace = false (set it true to record them)"
    if "step_trace" in backend.get("not_exposed", []):
        return f"recorded by {backend.get('name', 'a backend')}, which keeps no record of its steps"
    return "recorded before step traces were logged"
