"""One run, from its folder's lock to its report files: the one way the window's engine loop
(workbench/live/engine_loop.py) and headless runs (workbench/bench/headless.py) open, record,
finish and report a run, so that the same traffic on the same engine leaves the same run log
through either (tests/workbench/session/test_run_session.py).

A session holds its folder's lock while it writes (a second writer is refused), probes the
machine's speed at the start and the end where this machine times the run, and writes the
report files beside the log however the run ends: finished, stopped early (`finish`), or cut
short by an engine that broke, a Ctrl-C or a bug (`abandon`: the log has no footer, and its
report says the run is incomplete). The rule that a run waits for the engine's warm-up lives here
too (`is_warming_up`, `wait_until_warm`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from engine.simulation import is_simulated
from workbench.analysis.report import write_report_files
from workbench.backends.local import LocalBackend
from workbench.backends.protocol import Backend, BackendUpdate
from workbench.machine.probe import probe_machine
from workbench.runs.run_folder import RunFolderLock
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME, RunRecorder
from workbench.runs.runner import EndedRequest, ScenarioRunner

# How often a wait for the warm-up says how far it has got.
_WARM_UP_REPORT_EVERY_S = 10.0


def is_warming_up(backend: Backend) -> bool:
    """The backend still compiles its decode graph: a run started now must wait. Steps made beside
    the compile are 5 (median) to 65 (90th percentile) times as slow as compiled ones
    (docs/compiled-decode.md, "Warm-up: who waits"), so a run that measured them measured the
    warm-up, not the engine."""
    return backend.warm_up_progress() is not None


def wait_until_warm(backend: Backend, report: Callable[[str], None]) -> None:
    """Block until the backend's warm-up has ended, reporting its progress every few seconds."""
    reported_at = None
    while (progress := backend.warm_up_progress()) is not None:
        if reported_at is None or time.monotonic() - reported_at >= _WARM_UP_REPORT_EVERY_S:
            report(f"warming up before the run: {progress.describe()}")
            reported_at = time.monotonic()
        time.sleep(0.2)


def machine_probe_if_timed_here(backend: Backend) -> dict | None:
    """The machine's speed (workbench/machine/probe.py) where this machine's speed sets the run's:
    the in-process engine on real weights. A simulated GPU's steps are timed by its cost model, and
    a server's by its own machine."""
    if isinstance(backend, LocalBackend) and not is_simulated(backend.engine.config.model):
        return probe_machine()
    return None


class RunSession:
    """One run logged into `folder`: opened before the run's clock starts (`RunSession(folder,
    backend)`: the folder's lock and the machine's probe), begun once its runner holds the run's
    traffic (`begin`: the log's header), fed the runner's updates and ended requests (`update`,
    `request_ended`), and ended once with `finish` or `abandon`."""

    def __init__(self, folder: Path, backend: Backend):
        """ConfigError where another process writes `folder` or a file in it is a symbolic link.
        The probe takes about 0.2 s: before the runner's clock starts, or it would count as the
        first requests' queue time."""
        self.folder = folder
        self._backend = backend
        self._runner: ScenarioRunner | None = None
        self._recorder: RunRecorder | None = None
        self._lock = RunFolderLock(folder)
        try:
            self._probe_at_start = machine_probe_if_timed_here(backend)
        except BaseException:
            self._lock.release()
            raise

    def begin(self, runner: ScenarioRunner, scenario: dict, variant: str | None = None) -> None:
        """Write the log's header for the run `runner` is about to make. `scenario`: the run's
        scenario as a dict, its "engine" the configuration that runs."""
        self._runner = runner
        self._recorder = RunRecorder.for_run(
            self.log_path, self._backend, runner, scenario, variant, machine_probe=self._probe_at_start
        )

    @property
    def log_path(self) -> Path:
        return self.folder / RUN_LOG_NAME

    @property
    def header(self) -> dict:
        return self._recorder.header

    def update(self, update: BackendUpdate) -> None:
        self._recorder.update(update)

    def request_ended(self, ended: EndedRequest) -> None:
        self._recorder.request_ended(ended)

    def finish(self, ended_by: str | None = None, stopped_by: str | None = None) -> dict:
        """Close the run whole: the requests still in flight logged as unfinished, the footer, then
        report.json and the CSVs; the report. `ended_by`: what ends the run while it may still
        have requests in flight (a new run, a reload, the window's close), in words; `stopped_by`:
        what stopped its traffic earlier (the window's Stop). The footer names the first of them
        when the run did not end by itself."""
        try:
            result = self._runner.close_run(f"when {ended_by}" if ended_by else "when the run ended")
            stopped_by = (stopped_by or ended_by) if result.interrupted else None
            probe = machine_probe_if_timed_here(self._backend)
            self._recorder.finish(result, machine_probe=probe, stopped_by=stopped_by)
            return self._write_report()
        finally:
            self._lock.release()

    def abandon(self) -> dict | None:
        """Close the log without a footer, where the run could not be closed whole (the engine
        broke, a Ctrl-C, a bug outside the step), and write the report files from what it holds:
        the report says the run did not end cleanly. The report; None where no header was written."""
        try:
            if self._recorder is None:
                return None
            self._recorder.close()
            return self._write_report()
        finally:
            self._lock.release()

    def _write_report(self) -> dict:
        return write_report_files(read_run_log(self.log_path, with_traces=True), self.folder)
