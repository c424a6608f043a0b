"""`workbench explain`: why a run's slowest requests took their time, split into causes from its step traces."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workbench.cli.arguments import at_least, read_run_for


def percentile(text: str) -> float:
    """An argparse type: a percentile as p90, p99.9 or 90."""
    value = at_least(float, 0.0)(text[1:] if text.lower().startswith("p") else text)
    if value >= 100:
        raise argparse.ArgumentTypeError(f"expected a percentile below 100 (p50, p90, p99), got {text}")
    return value


def add_to(commands) -> None:
    explain = commands.add_parser(
        "explain", help="why a run's tail requests took their time: waiting (and for what), prefill, decode, preempted"
    )
    explain.add_argument("run", type=Path, help="a run folder (holding run.jsonl) or the run.jsonl itself")
    explain.add_argument(
        "--above",
        type=percentile,
        default=90.0,
        metavar="pNN",
        help="the tail: requests whose arrival-to-last-token time is at or above this percentile (default p90)",
    )
    explain.add_argument("--tag", help="only requests with this tag (e.g. chat)")
    explain.add_argument(
        "--slowest", type=at_least(int, 0), default=5, metavar="N", help="list the N slowest (default 5)"
    )
    explain.add_argument("--json", type=Path, metavar="FILE", help="also write the explanation as JSON")
    explain.set_defaults(handler=run)


def run(args) -> int:
    from engine.errors import ConfigError
    from workbench.analysis.explain import explain, explanation_record, format_explanation

    path, log = read_run_for(args.run, with_traces=True)
    tags = sorted({record["tag"] for record in log.requests})
    if args.tag is not None and args.tag not in tags:
        raise ConfigError(f"--tag: no request tagged {args.tag!r} in {path}; its tags are {', '.join(tags) or 'none'}")
    explanation = explain(log, args.above, args.tag, args.slowest)
    scenario = log.header.get("scenario", {})
    variant = log.header.get("variant")
    print(format_explanation(explanation, f"{scenario.get('name', path)}{' / ' + variant if variant else ''}"))
    if "serving_stack" in log.header.get("engine", {}):  # simulated GPUs: the times are worth what the simulator is
        from workbench.analysis.report import simulated_error
        from workbench.runs.run_log import step_stats

        for stated in simulated_error(log.header, [step_stats(record) for record in log.steps]).values():
            print(f"  {stated['says']}")
    if args.json:
        args.json.write_text(json.dumps(explanation_record(explanation), indent=2) + "\n")
    return 0
