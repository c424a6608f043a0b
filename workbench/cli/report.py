"""`workbench report RUN`: a run folder's report files (report.json, requests.csv, steps.csv) built
again from its run log: for a run whose process was killed before it wrote them, or a log from an
older version. The folder must not be one another process is writing."""

from __future__ import annotations

from pathlib import Path


def add_to(commands) -> None:
    report = commands.add_parser("report", help="rebuild a run folder's report files from its run log")
    report.add_argument("run", type=Path, help="a run folder (holding run.jsonl)")
    report.set_defaults(handler=run)


def run(args) -> int:
    from engine.errors import ConfigError
    from workbench.analysis.report import write_report_files
    from workbench.cli.arguments import read_run_for
    from workbench.cli.bench import print_summary
    from workbench.runs.run_folder import RunFolderLock

    if not args.run.is_dir():
        raise ConfigError(f"{args.run}: not a folder; give the run folder that holds run.jsonl")
    with RunFolderLock(args.run):
        _, log = read_run_for(args.run, with_traces=True)
        report = write_report_files(log, args.run)
    print_summary(report)
    state = "complete" if report["complete"] else "incomplete: " + "; ".join(report["incomplete_because"])
    print(f"report: {args.run / 'report.json'} ({state})")
    return 0
