"""`workbench trace`: a run's step traces, one step in four parts or one request's history."""

from __future__ import annotations

from pathlib import Path

from workbench.cli.arguments import at_least, read_run_for


def add_to(commands) -> None:
    trace = commands.add_parser("trace", help="a run's step traces: one step in four parts, or one request's history")
    trace.add_argument("run", type=Path, help="a run folder (holding run.jsonl) or the run.jsonl itself")
    which = trace.add_mutually_exclusive_group()
    which.add_argument(
        "--step", type=at_least(int, 0), help="the engine step to print: before, computation, persisted, to the caller"
    )
    which.add_argument("--request", help="a request id: every step that touched it")
    trace.set_defaults(handler=run)


def run(args) -> int:
    from engine.errors import ConfigError
    from workbench.step_traces.log import read_trace, why_no_traces
    from workbench.step_traces.text import format_request, format_step

    path, log = read_run_for(args.run, with_traces=True)
    if not log.traces:
        raise ConfigError(f"{path}: this run log has no step traces: {why_no_traces(log.header)}")
    first, last = log.traces[0]["step"], log.traces[-1]["step"]
    if args.step is not None:
        record = next((record for record in log.traces if record["step"] == args.step), None)
        if record is None:
            raise ConfigError(f"{path}: no trace of step {args.step}; this log traces steps {first}..{last}")
        print(format_step(read_trace(record), log.header["start_time"]))
    elif args.request is not None:
        arrival = next(
            (request["arrival_time"] for request in log.requests if request["request_id"] == args.request), None
        )
        traces = [read_trace(record) for record in log.traces]
        if arrival is None and not any(args.request in {row.request_id for row in trace.rows} for trace in traces):
            raise ConfigError(f"{path}: no request {args.request!r} in this run")
        print(format_request(traces, args.request, arrival, log.header["start_time"]))
    else:
        full = sum(record["full"] for record in log.traces)
        preemptions = sum(len(record["preemptions"]) for record in log.traces)
        print(
            f"{path}: steps {first}..{last} traced ({full} in full, {len(log.traces) - full} as summaries); "
            f"{preemptions} preemptions. Print one with --step N, or a request's history with --request ID."
        )
    return 0
