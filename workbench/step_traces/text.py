"""Step traces as text: one step in its four parts, and one request's causal history.

Used by `workbench trace RUN_DIR --step N | --request ID`; the window's Step panel shows the same
parts as tables.
"""

from __future__ import annotations

from engine.requests.step_trace import ALLOCATE, REUSE, BlockChange, KvState, ScheduledRow, Speculation, StepTrace


def block_ranges(block_ids: list[int]) -> str:
    """[3, 4, 5, 9] -> "3-5, 9": block lists stay short when blocks were handed out in a run."""
    parts, start = [], None
    for index, block_id in enumerate(block_ids):
        if start is None:
            start = block_id
        following = block_ids[index + 1] if index + 1 < len(block_ids) else None
        if following != block_id + 1:
            parts.append(str(start) if start == block_id else f"{start}-{block_id}")
            start = None
    return ", ".join(parts) or "none"


def kv_text(state: KvState) -> str:
    holding = f"{state.cached_free_blocks} of them holding a reusable prefix"
    return f"{state.used_blocks} used, {state.free_blocks} free ({holding})"


def row_tokens(row: ScheduledRow) -> str:
    if row.kind == "decode":
        proposed = row.end - row.start - 1  # speculative proposals computed with the decode
        return f"decode at {row.start}" + (f" with {proposed} proposed tokens" if proposed else "")
    what = "recompute" if row.recompute else "prefill"
    return f"{what} {row.start}..{row.end} of {row.num_prompt_tokens if not row.recompute else row.end}"


def speculation_text(record: Speculation) -> str:
    return f"proposed {record.proposed}, accepted {record.accepted}, rejected {record.rejected}"


def change_text(change: BlockChange) -> str:
    count = len(change.block_ids)
    if change.action == ALLOCATE:
        return f"took {count} fresh block{'s' * (count != 1)} [{block_ranges(change.block_ids)}]"
    if change.action == REUSE:
        revived = f", {len(change.free_list)} of them from the free list" if change.free_list else ""
        return f"reused {count} cached prefix block{'s' * (count != 1)} [{block_ranges(change.block_ids)}]{revived}"
    shared = count - len(change.free_list)
    kept = f"; {shared} still held by others" if shared else ""
    return f"released {count} block{'s' * (count != 1)} [{block_ranges(change.block_ids)}] ({change.cause}){kept}"


def format_step(trace: StepTrace, origin: float = 0.0) -> str:
    """`origin`: the engine-clock time the run started; times print as seconds into the run."""
    lines = [f"step {trace.step}, ends {trace.time_s - origin:.3f} s into the run"]
    lines += [
        "before:",
        f"  queues: {trace.waiting} waiting, {trace.waiting_long} waiting_long, {trace.running} running; "
        f"token budget {trace.token_budget}",
        f"  KV blocks: {kv_text(trace.kv_before)}",
    ]
    lines += [
        f"  request {change.request_id} {change_text(change)} before the step" for change in trace.released_before
    ]
    lines.append(
        f"computation: {len(trace.rows) + trace.decode_rows_omitted} rows, {1000 * trace.execute_s:.1f} ms in the "
        f"executor (forward and sampling), {1000 * trace.other_s:.1f} ms other (scheduling, bookkeeping)"
    )
    for row in trace.rows:
        admitted = f", admitted from {row.admitted_from}" if row.admitted_from else ""
        lines.append(f"  request {row.request_id}: {row_tokens(row)}{admitted}")
    if trace.decode_rows_omitted:
        lines.append(
            f"  and {trace.decode_rows_omitted} decode rows (a summary trace counts them without listing them)"
        )
    lines += [f"  not admitted: request {held.request_id}, head of {held.queue}: {held.reason}" for held in trace.held]
    lines += [f"  request {record.request_id}: {speculation_text(record)}" for record in trace.speculation]
    lines.append("persisted:")
    lines += [f"  request {change.request_id} {change_text(change)}" for change in trace.block_changes]
    lines += [f"  preempted request {preemption.victim}: {preemption.reason}" for preemption in trace.preemptions]
    if trace.registered:
        lines.append(
            f"  findable by prefix now: {len(trace.registered)} blocks [{block_ranges(sorted(trace.registered))}]"
        )
    lines.append(
        f"  KV blocks after: {kv_text(trace.kv_after)} = {trace.kv_before.used_blocks} used before "
        f"+ {trace.blocks_taken()} taken - {trace.blocks_returned()} returned"
    )
    lines.append("to the caller:")
    for emitted in trace.emitted:
        finished = (
            f", finished: {emitted.finish_reason}" + (f" ({emitted.finish_detail})" if emitted.finish_detail else "")
            if emitted.finish_reason
            else ""
        )
        lines.append(f"  request {emitted.request_id}: tokens {emitted.token_ids}{finished}")
    if trace.tokens_omitted:
        lines.append(f"  and {trace.tokens_omitted} tokens from decode rows (counted, not listed)")
    if not trace.emitted and not trace.tokens_omitted:
        lines.append("  nothing")
    return "\n".join(lines)


def request_events(trace: StepTrace, request_id: str) -> list[str]:
    """What one step did to or for one request, in the order of the four parts."""
    events = [
        f"{change_text(change)} before the step" for change in trace.released_before if change.request_id == request_id
    ]
    events += [
        f"waited at the head of {held.queue}: {held.reason}" for held in trace.held if held.request_id == request_id
    ]
    for row in trace.rows:
        if row.request_id == request_id:
            events.append(row_tokens(row) + (f", admitted from {row.admitted_from}" if row.admitted_from else ""))
    events += [speculation_text(record) for record in trace.speculation if record.request_id == request_id]
    events += [change_text(change) for change in trace.block_changes if change.request_id == request_id]
    events += [f"preempted: {preemption.reason}" for preemption in trace.preemptions if preemption.victim == request_id]
    for emitted in trace.emitted:
        if emitted.request_id == request_id:
            if emitted.token_ids:
                events.append(f"emitted {emitted.token_ids}")
            if emitted.finish_reason:
                events.append(
                    f"finished: {emitted.finish_reason}"
                    + (f" ({emitted.finish_detail})" if emitted.finish_detail else "")
                )
    return events


def format_request(
    traces: list[StepTrace], request_id: str, arrival_time: float | None = None, origin: float = 0.0
) -> str:
    """Every step that touched the request: queued, admitted from which queue, chunks, blocks,
    preemptions, tokens. Runs of plain decode steps fold into one line; steps where it waited
    behind another queue head are counted. Times on the engine clock, printed as seconds since `origin`."""
    lines = [
        f"request {request_id}"
        + (f", arrived {arrival_time - origin:.3f} s into the run" if arrival_time is not None else "")
    ]
    queued, ever_admitted, waited_behind = False, False, 0
    decodes: list[tuple[StepTrace, ScheduledRow, list[int]]] = []  # a run of plain decode steps

    def flush() -> None:
        nonlocal waited_behind
        if waited_behind:
            lines.append(f"  {waited_behind} step{'s' * (waited_behind != 1)} waiting behind the head of its queue")
            waited_behind = 0
        if decodes:
            (first, first_row, _), (last, last_row, _) = decodes[0], decodes[-1]
            tokens = [token for _, _, emitted in decodes for token in emitted]
            steps = f"step {first.step}" if first is last else f"steps {first.step}-{last.step}"
            lines.append(
                f"  {steps} ({first.time_s - origin:.3f}-{last.time_s - origin:.3f} s): decode at "
                f"{first_row.start}..{last_row.start}; emitted {tokens}"
            )
            decodes.clear()

    for trace in traces:
        step_start = trace.time_s - trace.execute_s - trace.other_s
        if not ever_admitted and arrival_time is not None and arrival_time <= step_start:
            queued = True  # it had arrived when this step was scheduled
        events = request_events(trace, request_id)
        if not events:
            waited_behind += queued
            continue
        row = next((row for row in trace.rows if row.request_id == request_id), None)
        if row is not None and row.kind == "decode" and len(events) == 2 and events[1].startswith("emitted"):
            decodes.append(
                (trace, row, next(entry.token_ids for entry in trace.emitted if entry.request_id == request_id))
            )
            continue
        flush()
        lines.append(f"  step {trace.step} ({trace.time_s - origin:.3f} s): " + "; ".join(events))
        admitted = row is not None and row.admitted_from is not None
        preempted = any(preemption.victim == request_id for preemption in trace.preemptions)
        ever_admitted |= admitted
        queued = preempted or (queued and not admitted)
    flush()
    return "\n".join(lines)
