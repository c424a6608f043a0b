"""A scenario run without a GUI: backend + runner + run log + report files.

This is `workbench bench`'s back end; the GUI's "save run" writes the same files.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from engine.loading.model_file import ModelSource
from engine.simulation import is_simulated
from workbench.analysis.report import write_report_files
from workbench.backends.local import LocalBackend, in_process_backend
from workbench.backends.protocol import Backend
from workbench.machine.probe import probe_machine
from workbench.runs.run_folder import RunFolderLock
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME, RunRecorder
from workbench.runs.runner import EndedRequest, ScenarioRunner
from workbench.traffic.prompts import text_stream
from workbench.traffic.scenario import Scenario

# How often a wait for the warm-up says how far it has got.
_WARM_UP_REPORT_EVERY_S = 10.0


def wait_until_warm(backend: Backend, report: Callable[[str], None]) -> None:
    """Wait for the backend's warm-up (the decode graph's compile) to end, reporting its progress:
    a run must not measure steps made beside the compile, 5 (median) to 65 (90th percentile) times
    as slow as compiled ones (docs/compiled-decode.md, "Warm-up: who waits")."""
    reported_at = None
    while (progress := backend.warm_up_progress()) is not None:
        if reported_at is None or time.monotonic() - reported_at >= _WARM_UP_REPORT_EVERY_S:
            report(f"warming up before the run: {progress.describe()}")
            reported_at = time.monotonic()
        time.sleep(0.2)


def _probe_if_timed_here(backend: Backend) -> dict | None:
    """The machine's speed (workbench/machine/probe.py) where this machine's speed sets the run's:
    the in-process engine on real weights. A simulated GPU's steps are timed by its cost model, and
    a server's by its own machine."""
    if isinstance(backend, LocalBackend) and not is_simulated(backend.engine.config.model):
        return probe_machine()
    return None


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
    probe_at_start = _probe_if_timed_here(backend)  # before the runner's clock starts
    runner = ScenarioRunner(backend, scenario)
    log_path = out_dir / RUN_LOG_NAME
    recorder = RunRecorder.for_run(
        log_path, backend, runner, dataclasses.asdict(scenario), variant, machine_probe=probe_at_start
    )

    def request_ended(ended: EndedRequest) -> None:
        recorder.request_ended(ended)
        on_progress(ended, runner.total_requests)

    runner.on_step = recorder.update
    runner.on_request_end = request_ended
    interrupted = False
    try:
        result = runner.run(runner.start_time)
        recorder.finish(result, machine_probe=_probe_if_timed_here(backend))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        recorder.close()
    report = write_report_files(read_run_log(log_path, with_traces=True), out_dir)
    if interrupted:
        raise KeyboardInterrupt
    return report
