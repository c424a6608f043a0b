"""One run's log, written as the run happens: the header (provenance, scenario, seed, requests
planned), a line per backend update that carries server state, the step's trace where the backend
has one, a line per ended request, and the footer once the run has ended. A log without a footer
is an interrupted run (its report says so). Headless runs and the window record through one run
session (workbench/session/run_session.py)."""

from __future__ import annotations

from pathlib import Path

from workbench.backends.protocol import BLOCK_CACHED, Backend, BackendUpdate
from workbench.runs.run_log import RunLogWriter
from workbench.runs.runner import EndedRequest, RunResult, ScenarioRunner
from workbench.step_traces.log import FULL_TRACE_STEPS, TRACE_COLUMNS, check_trace_level, trace_record

RUN_LOG_NAME = "run.jsonl"


def _run_header(
    backend: Backend,
    scenario: dict,
    *,
    variant: str | None,
    seed: int,
    requests_planned: int | None,
    start_time: float,
    machine_probe: dict | None,
    trace_replay: dict | None,
) -> dict:
    """The run log's first line: everything needed to read and reproduce the run."""
    description = backend.describe()
    return {
        "start_time": start_time,
        "scenario": scenario,
        "variant": variant,
        "seed": seed,
        "backend": {"name": backend.name, "not_exposed": backend.capabilities.missing()},
        "versions": description["versions"],
        "engine": description["engine"],
        "requests_planned": requests_planned,
        "trace_columns": TRACE_COLUMNS,
        "machine_probe": machine_probe,  # workbench/machine/probe.py, before the first request (timed here)
        "trace_replay": trace_replay,  # a replayed trace: its file, rows read, requests, how many were cut to fit
        "prefix_cache_at_start": prefix_cache_at_start(backend),
    }


def prefix_cache_at_start(backend: Backend) -> dict | None:
    """The KV blocks that already hold reusable prefixes as the run starts, left by earlier runs on
    the same engine: a rerun's prompts hit them, and start faster than the first run's did. None
    where the backend shows no block map (a server, a simulated deployment)."""
    owners = backend.block_owners({}) if backend.capabilities.block_map else None
    return None if owners is None else {"cached_blocks": int((owners == BLOCK_CACHED).sum())}


class RunRecorder:
    """`trace`: how much of each step's trace to write (workbench/step_traces/log.py)."""

    def __init__(self, path: Path, header: dict, trace: str = "auto"):
        if path.exists():
            path.unlink()  # a rerun into the folder the user named for it starts a fresh log
        self._trace = check_trace_level(trace)
        self._traces_written = self._full_traces = 0
        self._writer: RunLogWriter | None = RunLogWriter(path)
        self.header = {**header, "trace": trace}
        self._writer.write("header", self.header)

    @classmethod
    def for_run(
        cls,
        path: Path,
        backend: Backend,
        runner: ScenarioRunner,
        scenario: dict,
        variant: str | None = None,
        machine_probe: dict | None = None,
    ) -> RunRecorder:
        """The run log of the run `runner` is about to make on `backend`, opened by the run session
        (workbench/session/run_session.py) that headless runs and the window share. `scenario` is
        the scenario as a dict (its seed, trace level and SLO are read from it)."""
        header = _run_header(
            backend,
            scenario,
            variant=variant,
            seed=scenario.get("seed", 0),
            requests_planned=runner.total_requests,
            start_time=runner.start_time,
            machine_probe=machine_probe,
            trace_replay=runner.plan.trace_summary if runner.plan is not None else None,
        )
        return cls(path, header, trace=scenario.get("trace", "auto"))

    def update(self, update: BackendUpdate) -> None:
        if self._writer is None:
            return
        if update.stats is not None:
            self._writer.step(update.stats)
        if update.trace is not None:
            full = self._trace == "full" or (self._trace == "auto" and self._traces_written < FULL_TRACE_STEPS)
            self._writer.write("trace", trace_record(update.trace, full))
            self._traces_written += 1
            self._full_traces += full

    def request_ended(self, ended: EndedRequest) -> None:
        if self._writer is not None:
            self._writer.request(ended.request_id, ended.tag, ended.metrics, ended.sent_index, ended.planned)

    def finish(self, result: RunResult, machine_probe: dict | None = None, stopped_by: str | None = None) -> None:
        """Write the footer and close: the run is whole. `machine_probe`: the machine's speed
        after the last request (workbench/machine/probe.py); `stopped_by`: what stopped the run
        before its traffic ended, in words (the window's Stop, a new run, a reload)."""
        if self._writer is not None:
            self._writer.write(
                "footer",
                {
                    "duration_s": result.duration_s,
                    "stopped_early": result.interrupted,
                    "stopped_by": stopped_by,
                    "requests_unfinished": result.num_unfinished,
                    "requests_not_sent": result.num_not_sent,
                    "traces": self._traces_written,
                    "traces_full": self._full_traces,
                    "problems": result.problems,
                    "machine_probe": machine_probe,
                    "sessions_cut_by_context": result.sessions_cut_by_context,
                    "sessions_started": result.sessions_started,
                },
            )
        self.close()

    def close(self) -> None:
        """Close without a footer (interrupted, or replaced by a new run)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
