"""`workbench replay`: a recorded run's requests sent again through any backend with other settings,
a run folder of its own, a per-request comparison and a decision record against the original."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from workbench.cli.arguments import add_server_model_options, add_set_option, read_run_for


def add_to(commands) -> None:
    replay = commands.add_parser(
        "replay", help="what if: re-send a recorded run's requests with other settings or on another backend"
    )
    replay.add_argument("run", type=Path, help="the recorded run's folder (holding run.jsonl and report.json)")
    add_set_option(replay, "a setting changed for the replay, e.g. engine.max_num_seqs=16 (keys: docs/knobs.md)")
    replay.add_argument(
        "--backend",
        metavar="WHERE",
        help="where to replay: a model for the in-process engine (smollm2-135m, a .gguf, simulated:MODEL@GPU) "
        "or a server's URL (http://HOST:PORT); default: the original run's engine settings",
    )
    replay.add_argument("--intended", action="append", default=[], metavar="METRIC:+N%", help="the gain intended")
    replay.add_argument(
        "--tolerated", action="append", default=[], metavar="METRIC:-N%", help="the regression tolerated"
    )
    replay.add_argument("--out", required=True, type=Path, help="folder for the replay's run and the comparison")
    replay.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_server_model_options(replay)
    replay.set_defaults(handler=run)


def run(args) -> int:
    from engine.errors import ConfigError
    from workbench.analysis.compare import Criterion, compare, format_comparison, load_report
    from workbench.analysis.replay import (
        PER_REQUEST_CSV,
        REPLAY_NOTE,
        REPLAY_TRACE,
        per_request_rows,
        per_request_summary,
        recorded_requests,
        replay_scenario,
        write_per_request_csv,
        write_replay_trace,
    )
    from workbench.bench.headless import run_headless
    from workbench.cli.arguments import backend_factory
    from workbench.cli.bench import print_summary
    from workbench.runs.run_log import read_run_log
    from workbench.runs.run_recorder import RUN_LOG_NAME

    terms = args.intended + args.tolerated
    criteria = [Criterion.parse(text) for text in terms]  # a bad term stops the replay before anything runs
    log_path, original = read_run_for(args.run, with_traces=False)
    folder = log_path.parent
    original_report = load_report(folder)
    unknown = [str(criterion) for criterion in criteria if criterion.metric not in original_report["metrics"]]
    if unknown:  # refused before the replay runs (minutes on a real model), not after
        raise ConfigError(f"{', '.join(unknown)}: no such metric in {folder / 'report.json'}")
    itself = args.out.resolve() == folder.resolve()
    if itself or any((args.out / name).exists() for name in (RUN_LOG_NAME, "report.json")):
        raise ConfigError(
            f"--out {args.out}: holds a run already ({'the run replayed' if itself else 'its files'}); a replay "
            "writes a run of its own: give a new or empty folder"
        )
    requests = recorded_requests(original, str(log_path))
    overrides = list(args.overrides)
    args.server = None
    if args.backend and args.backend.startswith(("http://", "https://")):
        args.server = args.backend
    elif args.backend:
        overrides.insert(0, f"engine.model={args.backend}")
    created = not args.out.exists()
    args.out.mkdir(parents=True, exist_ok=True)
    trace = args.out / REPLAY_TRACE
    write_replay_trace(requests, trace)
    try:
        scenario = replay_scenario(original, trace.resolve(), overrides, f"{log_path} (replayed)")
        make_backend, _ = backend_factory(args, scenario)
        backend = make_backend(scenario)
    except ConfigError:  # a bad --set or backend: no half-made --out left behind
        if created:
            shutil.rmtree(args.out)
        raise
    try:
        _refuse_terms_not_exposed(terms, criteria, original_report, backend)
        unknown_lengths = sum(not request.length_known for request in requests)
        guessed = (
            f"; {unknown_lengths} unfinished ones with the output they had produced (the log keeps no plans)"
            if unknown_lengths
            else ""
        )
        print(
            f"replaying {len(requests)} requests of {folder} on {backend.name} -> {args.out}"
            f" (prompts: synthetic tokens of the recorded lengths{guessed})",
            file=sys.stderr,
        )
        report = run_headless(scenario, args.out, backend=backend)
    finally:
        backend.close()
    print_summary(report)
    replayed = read_run_log(args.out / RUN_LOG_NAME)
    rows = per_request_rows(original, replayed)
    write_per_request_csv(rows, args.out / PER_REQUEST_CSV)
    if not args.no_plots:
        from workbench.gui.charts.replay_chart import export_per_request_image
        from workbench.gui.charts.report_images import export_plot_images

        export_plot_images(replayed, args.out)
        export_per_request_image(rows, args.out / "per_request.png")
    result = compare(original_report, report, args.intended, args.tolerated)
    # The traffic differs in the scenario's words only: the same requests were sent again.
    result["differences"] = [line for line in result["differences"] if not line.startswith("workload")]
    result["replay"] = REPLAY_NOTE
    text = format_comparison(result)
    (args.out / "comparison.txt").write_text(text + "\n")
    (args.out / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    print(text)
    print(f"replay: {REPLAY_NOTE}")
    print(per_request_summary(rows))
    if len(rows) < len(requests):
        raise ConfigError(f"the replay ended {len(rows)} of {len(requests)} requests; see {args.out}")
    return 0


def _refuse_terms_not_exposed(terms: list[str], criteria: list, original_report: dict, backend) -> None:
    """A decision term on a figure one of the two backends cannot see is refused before the replay."""
    from engine.errors import ConfigError
    from workbench.analysis.report import SERVER_STATE_METRICS

    sides = (
        (
            f"the original run's backend ({original_report.get('backend', {}).get('name', '?')})",
            original_report.get("backend", {}).get("not_exposed", []),
        ),
        (f"the replay's backend ({backend.name})", backend.capabilities.missing()),
    )
    for text, criterion in zip(terms, criteria):
        metric = criterion.metric.rsplit("/", 1)[-1]
        for capability, names in SERVER_STATE_METRICS.items():
            for who, missing in sides:
                if metric in names and capability in missing:
                    raise ConfigError(
                        f"decision term {text!r}: {metric} needs the {capability} capability, which {who} does not "
                        f"expose; drop the term or replay on a backend that has it"
                    )
