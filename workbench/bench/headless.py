"""A scenario run without a GUI: backend + runner + run log + report files.

This is `workbench bench`'s back end; the GUI's "save run" writes the same files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from engine.loading.model_file import ModelSource
from workbench.backends.local import in_process_backend
from workbench.backends.protocol import Backend
from workbench.runs.run_folder import RunFolderLock
from workbench.runs.runner import EndedRequest, ScenarioRunner
from workbench.session.run_session import RunSession, wait_until_warm
from workbench.traffic.prompts import text_stream
from workbench.traffic.scenario import Scenario


def run_headless(
    scenario: Scenario,
    out_dir: Path,
    *,
    variant: str | None = None,
    source: ModelSource | None = None,
    backend: Backend | None = None,
    on_progress: Callable[[EndedRequest, int | None], None] = lambda ended, total: None,
    on_warm_up: Callable[[str], None] = lambda message: None,
) -> dict:
    """Run the scenario on `backend` (default: the in-process engine of the scenario's [engine]
    table, from `source` if given), log it to out_dir/run.jsonl as it happens, then write the
    report files. Ctrl-C ends the run early: the report files are still written, built from the
    log and marked incomplete, and then the KeyboardInterrupt goes on to the caller (a bench of
    several variants stops, rather than starting the next); during the warm-up, before any file
    is written. ConfigError, before anything runs, where another process writes out_dir or
    a file in it is a symbolic link."""
    with RunFolderLock(out_dir):
        return _run_and_report(scenario, out_dir, variant, source, backend, on_progress, on_warm_up)


def _run_and_report(scenario, out_dir, variant, source, backend, on_progress, on_warm_up) -> dict:
    backend = backend or in_process_backend(scenario.engine, source)
    wait_until_warm(backend, on_warm_up)
    # One-time costs before the run's clock starts: requests are stamped with their planned
    # arrival, so what the first send and the header pay counts as their queue time. Here the
    # model file's SHA-256 for the header (cached once computed) and the text prompts are cut from
    # (reading ShareGPT, tokenising it): seconds, which would otherwise be every early request's
    # queue time (docs/measurements.md, "Figures behind the code").
    backend.describe()
    if backend.tokenizer is not None:
        text_stream(backend.tokenizer)
    session = RunSession(out_dir, backend)  # its machine probe before the runner's clock starts
    runner = ScenarioRunner(backend, scenario)
    session.begin(runner, dataclasses.asdict(scenario), variant)

    def request_ended(ended: EndedRequest) -> None:
        session.request_ended(ended)
        on_progress(ended, runner.total_requests)

    runner.on_step = session.update
    runner.on_request_end = request_ended
    try:
        runner.run(runner.start_time)
    except BaseException:  # a Ctrl-C, an engine that broke (EngineBroken), a bug: the report still
        session.abandon()
        raise
    return session.finish()
