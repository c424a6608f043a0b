"""The engine loop in its own thread, without Qt: the window's Qt adapter
(workbench/gui/engine_worker.py) turns its four events into signals.

The loop's thread is the only code that touches the backend. The GUI sends commands through a
thread-safe queue, drained between steps; the loop writes metrics into a `MetricsStore`, request
rows and the block map into `RequestRows`, step traces into a `TraceStore`, and the run log
through a `RunSession` (as headless runs do), all of which the GUI reads as snapshots on its
timers, so a fast engine cannot flood the window's event loop. Events carry only rare news (load
progress, loaded, errors, traffic state), never per-step data.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import EngineConfig, EngineError
from engine.core import EngineBroken
from engine.requests.metrics import UNFINISHED
from workbench.backends.loader import BackendLoader
from workbench.backends.protocol import Backend
from workbench.live.metrics_store import MetricsStore
from workbench.live.request_rows import RequestRow, RequestRows
from workbench.runs.run_folder import new_run_folder, runs_home
from workbench.runs.run_log import RunLogWriter
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.runs.runner import EndedRequest, ScenarioRunner
from workbench.session.run_session import RunSession, is_warming_up
from workbench.step_traces.store import TraceStore
from workbench.traffic.prompts import text_stream
from workbench.traffic.scenario import SLO, Scenario

_REFRESH_S = 0.1  # how often waiting rows and the block map are refreshed


class LoadCancelled(Exception):
    """Raised from a load's progress callback when a newer load, a cancel or a shutdown replaced it."""


@dataclass(frozen=True)
class EngineEvents:
    """What the loop tells its owner, called from the loop's thread."""

    loading: Callable[[str, float], None]  # stage, fraction done
    loaded: Callable[[object], None]  # EngineInfo, or ServerInfo for a server
    failed: Callable[[str], None]  # a one-line message for the user
    traffic_state: Callable[[str], None]  # "idle" (loaded), "running", "paused", "stopped", "finished"


class EngineLoop:
    def __init__(self, events: EngineEvents, runs_dir: Path | None = None, loader: BackendLoader | None = None):
        self.events = events
        # Every run gets a folder of its own under runs_dir, created when its first request is
        # sent, closed with its footer and report files when it ends, and never removed: a new
        # run, a reload or closing the window keeps every earlier run on disk.
        self.runs_dir = runs_dir or runs_home()
        self.run_folder: Path | None = None  # the current run's, once it has sent a request
        self._session: RunSession | None = None  # the current run's, once it has sent a request
        self._run_to_log: dict | None = None  # the scenario of the run whose folder is not made yet
        self._stopped_by: str | None = None  # what stopped the current run's traffic early, if anything
        # Each load request and each cancel counts up: a load whose number is no longer the
        # latest stops at its next stage, and the traffic sent with it is dropped (double-clicking
        # three presets during a load queued four full loads).
        self._load_number = 0
        self._refused_load = 0  # the number of the last load that failed: traffic sent with it never runs
        self._shutting_down = False
        self.store: MetricsStore | None = None
        self.slo = SLO()
        self._commands: queue.Queue = queue.Queue()
        self._loader = loader or BackendLoader()
        self._backend: Backend | None = None
        self._loaded_config: EngineConfig | None = None  # the backend's, as loaded: what a run records
        self._runner: ScenarioRunner | None = None
        # A run started while the decode graph compiles: it starts once the engine is warm.
        self._held_run: Scenario | None = None
        self._injections_start_a_run = False  # a Start's run has ended: the next injection begins another
        self._run_was_started = False  # the current run is a Start's (it ends once its traffic has)
        self._requests: RequestRows | None = None
        # Step traces since the engine was loaded, for the Step panel (None: the backend has none).
        self.traces: TraceStore | None = None
        self._last_refresh = 0.0
        self._thread = threading.Thread(target=self._loop, name="engine-loop", daemon=True)

    # ----- GUI thread: commands ------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def load(self, config: EngineConfig) -> None:
        """Load `config`, replacing any load not finished yet (the latest wins)."""
        self._load_number += 1
        self._commands.put(("load", (config, self._load_number)))

    def cancel_load(self) -> None:
        """Stop the load in progress at its next stage, and any queued; the engine loaded keeps
        serving. `loading` then reports the stage "load cancelled"."""
        self._load_number += 1
        self._commands.put(("cancelled", None))

    def start_traffic(self, scenario: Scenario, with_load: bool = False) -> None:
        """Run `scenario` on the engine loaded when the command is handled. `with_load`: it was sent
        with a load (a preset's engine) and runs only on that engine: a refused load runs nothing.
        A later Start runs on the engine kept."""
        self._commands.put(("traffic", (scenario, self._load_number, with_load)))

    def pause_traffic(self) -> None:
        self._commands.put(("pause", None))

    def resume_traffic(self) -> None:
        self._commands.put(("resume", None))

    def stop_traffic(self, drop_waiting: bool = False) -> None:
        """Send no more traffic; with drop_waiting, also abort the requests sent that still wait."""
        self._commands.put(("stop", drop_waiting))

    def inject(self, count: int, prompt_tokens: int, output_tokens: int, tag: str, slo: SLO | None = None) -> None:
        """Send `count` requests now. `slo`: the SLO fields, which a run of injected requests (before
        any Start) is judged by, fixed at its first injection."""
        self._commands.put(("inject", (count, prompt_tokens, output_tokens, tag, slo)))

    def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id))

    def save_log_copy(self, path: Path, timeout_s: float = 120.0) -> None:
        """A copy of the run log as it is now, closed with a footer: at any moment, mid-run too.
        Written by the engine thread between two steps, so that it holds every request sent:
        those still in flight as "unfinished" with what they have so far, the planned ones not sent
        yet as a count (not "never sent", and not a crash)."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(("save", (path, done)))
        done.result(timeout=timeout_s)

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Stop traffic and the loop; True when the thread has ended. The loop reads commands
        between steps, so by default this waits for the step in flight (seconds, for a long
        prefill on a CPU): tearing the interpreter down under a running step aborts the process."""
        if not self._shutting_down:
            self._shutting_down = True
            self._load_number += 1  # a load stops at its next stage rather than run to its end
            self._commands.put(("shutdown", None))
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # ----- GUI thread: snapshots -----------------------------------------------------------------

    def rows(self) -> list[RequestRow]:
        requests = self._requests
        return requests.rows() if requests is not None else []

    def row(self, request_id: str) -> RequestRow | None:
        requests = self._requests
        return requests.row(request_id) if requests is not None else None

    def block_map(self) -> np.ndarray:
        requests = self._requests
        return requests.block_map() if requests is not None else np.empty(0, dtype=np.int64)

    def window_blocks(self) -> np.ndarray:
        requests = self._requests
        return requests.window_blocks() if requests is not None else np.empty(0, dtype=bool)

    @property
    def run_log_path(self) -> Path | None:
        """The current run's log; None until the run has sent its first request."""
        folder = self.run_folder
        return folder / RUN_LOG_NAME if folder is not None else None

    def at_rest(self) -> bool:
        """Every request sent has ended and no traffic is left to send: the run so far is whole."""
        runner = self._runner
        return (
            not self.requests_in_flight()
            and not (runner is not None and runner.traffic_pending)
            and not self.run_held()
        )

    def run_held(self) -> bool:
        """A run waits for the engine's warm-up (the decode graph's compile) to end."""
        return self._held_run is not None

    def has_backend(self) -> bool:
        """An engine or server is loaded (a failed load keeps the previous one)."""
        return self._backend is not None

    def requests_in_flight(self) -> int:
        requests = self._requests
        return requests.num_in_flight() if requests is not None else 0

    def requests_waiting(self) -> int:
        requests = self._requests
        return requests.num_waiting() if requests is not None else 0

    def requests_sent(self) -> int:
        requests = self._requests
        return len(requests) if requests is not None else 0

    # ----- worker thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        was_busy = False
        while True:
            if self._held_run is not None and not is_warming_up(self._backend):
                self._start_run(self._held_run)
            busy = self._runner is not None and (self._backend.has_unfinished() or self._runner.traffic_pending)
            if was_busy and not busy and self._runner is not None:
                self._requests.refresh()  # the last states and block map: the idle loop refreshes nothing
                # Every request sent has ended, nothing is left to send.
                self.events.traffic_state(self._at_rest_state())
                self._end_started_run()
            was_busy = busy
            try:
                command, argument = self._commands.get(block=not busy, timeout=None if busy else 0.05)
            except queue.Empty:
                command = None
            if command == "shutdown":
                self._end_run("the window closed")
                self._close_backend()
                return
            try:
                if command is not None:
                    self._handle(command, argument)
                elif busy:
                    self._runner.tick()
                    self._refresh_if_due()
            except EngineBroken as error:
                self._drop_the_engine(str(error))
            except EngineError as error:
                self.events.failed(str(error))
            except Exception as error:  # noqa: BLE001 - the loop must survive a bug outside the step
                traceback.print_exc()
                self._drop_the_engine(f"{type(error).__name__}: {error}")

    def _drop_the_engine(self, why: str) -> None:
        """A failed step ends its requests and the engine goes on (engine/core.py); what comes here
        is an engine that could not even do that (EngineBroken), or a bug outside the step. Drop
        the engine, stop its traffic and close the run log without a footer (its report says
        incomplete); a new configuration reloads."""
        engine_was_running = self._backend is not None
        self._backend, self._runner, self._held_run = None, None, None
        self._end_run("the engine failed")  # no runner left: the log stays without a footer
        if engine_was_running:
            self.events.traffic_state("stopped")
        self.events.failed(f"engine stopped: {why}. Apply a configuration to reload.")

    def _handle(self, command: str, argument) -> None:
        if command == "cancelled":
            self.events.loading("load cancelled", 1.0)
            return
        if command == "load":
            config, number = argument
            if number == self._load_number:  # otherwise a later load or a cancel replaced it
                self._load(config, number)
            return
        if command == "save":
            path, done = argument
            try:
                self._write_log_copy(path)
            except Exception as error:  # noqa: BLE001 - handed to the GUI thread, which reports it
                done.set_exception(error)
            else:
                done.set_result(None)
            return
        if self._runner is None:
            raise EngineError("no model is loaded yet")
        if command == "traffic":
            scenario, load_number, with_load = argument
            if load_number != self._load_number or (with_load and load_number == self._refused_load):
                return  # sent with a load that was replaced, cancelled or refused: a refusal runs nothing
            if is_warming_up(self._backend):
                # Steps beside the compile run eagerly, 5 to 65 times as slow (docs/compiled-decode.md):
                # a run started now measured the warm-up, not the engine (the README's screenshot
                # showed chat-burst at goodput 0%). It starts once the engine is warm, as `bench`'s
                # does; `serve` holds its requests the same way.
                self._held_run = scenario
                self.events.traffic_state("held until the decode and prefill graphs are compiled")
                return
            self._start_run(scenario)
        elif command == "pause":
            self._runner.pause()
            self.events.traffic_state("paused")
        elif command == "resume":
            self._runner.resume()
            self.events.traffic_state("running")
        elif command == "stop":
            self._held_run = None
            self._runner.stop_traffic()
            if argument:
                self._runner.abort_waiting()
            if self._runner.result.interrupted:
                self._stopped_by = self._stopped_by or "Stop"
            self.events.traffic_state(self._at_rest_state() if self.at_rest() else "stopped")
        elif command == "inject":
            *request, slo = argument
            if self._injections_start_a_run:
                self._begin_injected_run()
            if self._run_to_log is not None and slo is not None:
                self._fix_slo(slo)  # the first injection of a run of its own: its SLOs are the fields'
            self._log_the_run()  # requests injected before any Start are a run of their own
            self._runner.inject(*request)
        elif command == "abort":
            self._backend.abort(argument)

    def _start_run(self, scenario: Scenario) -> None:
        """Each Start is a new run: its own time axis from zero, its own requests, store and run
        log. Requests the last run still has in flight end there, aborted: carried into the new
        run they counted in its percentiles on two clocks."""
        self._held_run, self._injections_start_a_run = None, False
        self._runner.end_in_flight()
        self._end_run("a new run started")
        # Its folder and the machine's probe before its clock starts; a run that cannot be
        # recorded does not run.
        session = self._open_session(scenario.name)
        self._runner.load_traffic(scenario)
        self.slo = scenario.slo
        self._requests = RequestRows(self._backend, self._backend.num_kv_blocks or 0)
        self.store = self._new_store()
        # The traffic is the run's; the engine is the one loaded, setting for setting (the traffic
        # panel's scenario carries the default engine, and replay re-runs what is recorded here).
        self._open_log({**dataclasses.asdict(scenario), "engine": dataclasses.asdict(self._loaded_config)})
        self._run_was_started = True
        try:
            self._log_the_run(session)
        except EngineError:
            self._runner.load_traffic(None)  # a run that cannot be recorded does not run
            raise
        warm = (self._session.header["prefix_cache_at_start"] or {}).get("cached_blocks")
        self.events.traffic_state(
            f"running (prefix cache warm: {warm} blocks from earlier runs)" if warm else "running"
        )

    def _load(self, config: EngineConfig, number: int) -> None:
        """Build the new backend, then replace the old one. The old one keeps serving until the
        new one has loaded (a mistyped path or an impossible cache leaves the working engine as it
        was), but its background compile is stopped first: the next engine must not be built
        beside it (two engines compiling at once share inductor's state and can corrupt the heap).
        A newer load, a cancel or a shutdown stops this one at the start of its next stage; one
        that ended meanwhile is closed unused."""

        def progress(stage: str, fraction: float) -> None:
            # Never at a stage's end: the engine's last one comes after its compile has started.
            if number != self._load_number and fraction < 1.0:
                raise LoadCancelled
            self.events.loading(stage, fraction)

        if self._backend is not None:
            self.events.loading("stopping the previous engine's background work (its compile)", 0.0)
            self._backend.stop_background_work()
        try:
            backend, info = self._loader.load(config, progress=progress)
        except LoadCancelled:
            return
        except Exception:
            self._refused_load = number
            raise
        if number != self._load_number:
            backend.close()
            return
        if self._runner is not None:
            self._runner.end_in_flight()  # the replaced engine's requests end in its run's log, aborted
        self._end_run("the engine was reloaded")
        self._close_backend()
        self._held_run = None  # it was for the engine replaced
        if backend.tokenizer is not None:
            self.events.loading("prompt text", 0.0)
            text_stream(backend.tokenizer)  # now, not as a stall at the first injected request
        self._backend, self._requests = backend, RequestRows(backend, backend.num_kv_blocks or 0)
        self._loaded_config = info.config
        self.traces = TraceStore(backend.num_kv_blocks) if backend.capabilities.step_trace else None
        self._runner = ScenarioRunner(
            backend,
            None,
            on_step=self._on_update,
            on_request_end=self._on_end,
            on_output=self._on_output,
            on_send=self._on_send,
        )
        self.store, self._injections_start_a_run = self._new_store(), False
        self._open_interactive_log()
        self.events.loading("ready", 1.0)
        self.events.traffic_state("idle")
        self.events.loaded(info)

    def _open_interactive_log(self) -> None:
        """The run that requests injected before any Start make (its folder at the first one)."""
        self._run_was_started = False
        self._open_log(
            {
                "name": "interactive",
                "engine": dataclasses.asdict(self._loaded_config),
                "slo": dataclasses.asdict(self.slo),
                "events": [],
            }
        )

    def _end_started_run(self) -> None:
        """A Start's run whose traffic is all sent and ended: its footer and report files now (they
        came only with the next run or the window's close). The window keeps showing it; requests
        injected after it are a run of their own (`_begin_injected_run`)."""
        if self._session is None or not self._run_was_started:
            return  # a run of injected requests goes on with the next injection
        self._end_run("its traffic ended")
        self._open_interactive_log()
        self._injections_start_a_run = True

    def _begin_injected_run(self) -> None:
        """The first injection after a finished run: a run of its own, its time from zero, its own
        rows and store."""
        self._injections_start_a_run = False
        self._runner.load_traffic(None)
        self._requests = RequestRows(self._backend, self._backend.num_kv_blocks or 0)
        self.store = self._new_store()

    def _write_log_copy(self, path: Path) -> None:
        if self._runner is None:
            raise EngineError("no model is loaded yet")
        if self.run_log_path is None:
            raise EngineError("the current run has sent no request yet: nothing to save")
        runner = self._runner
        path.write_bytes(self.run_log_path.read_bytes())
        if self._session is None:  # the run has ended: its log is whole, footer and all
            return
        in_flight = runner.in_flight_now("when the run was saved")
        writer = RunLogWriter(path)
        for ended in in_flight:
            writer.request(ended.request_id, ended.tag, ended.metrics, ended.sent_index, ended.planned)
        mid_run = bool(in_flight) or runner.traffic_pending
        not_sent_yet = runner.not_sent_yet() if runner.traffic_pending else 0
        writer.write(
            "footer",
            {
                "duration_s": self._seconds(),
                "stopped_early": mid_run or runner.result.interrupted,
                "stopped_by": self._stopped_by,
                "saved_mid_run": mid_run,
                "requests_unfinished": sum(ended.metrics.finish_reason == UNFINISHED for ended in in_flight),
                "requests_not_sent": None if not_sent_yet is None else runner.result.num_not_sent + not_sent_yet,
            },
        )
        writer.close()

    def _close_backend(self) -> None:
        """Close the backend before it is replaced: a remote one holds connections and a thread,
        the in-process engine may still be compiling its decode graph (the next engine must not be
        built beside that compile: it corrupted the heap once)."""
        backend, self._backend, self._runner = self._backend, None, None
        if backend is not None:
            backend.close()

    def _new_store(self) -> MetricsStore:
        backend = self._backend
        return MetricsStore(
            self._runner.start_time,
            kv_capacity_tokens=backend.kv_capacity_tokens or 0,
            kv_cache_bytes=backend.kv_cache_bytes or 0,
            slo=self.slo,
        )

    def _open_log(self, scenario: dict) -> None:
        """Each Start is a new run, and so is each load, for the requests injected before any
        Start: that one's folder is made only at its first injection, so a load leaves no empty
        folder behind."""
        scenario.setdefault("slo", dataclasses.asdict(self.slo))
        self._run_to_log, self._stopped_by = scenario, None

    def _fix_slo(self, slo: SLO) -> None:
        """The SLOs the run not yet logged is judged by, in its store and its log's header."""
        self.slo = self.store.slo = slo
        self._run_to_log["slo"] = dataclasses.asdict(slo)

    def _open_session(self, name: str) -> RunSession:
        """A new run's folder under the runs folder, locked, with the machine's probe."""
        try:
            folder = new_run_folder(self.runs_dir, name or "run")
        except OSError as error:
            raise EngineError(f"{self.runs_dir}: cannot make the run's folder ({error.strerror or error})") from None
        return RunSession(folder, self._backend)

    def _log_the_run(self, session: RunSession | None = None) -> None:
        """The current run's log (nothing when it is open already), in `session` or a new one."""
        if self._run_to_log is None:
            return
        scenario, self._run_to_log = self._run_to_log, None
        session = session or self._open_session(scenario.get("name"))
        try:
            session.begin(self._runner, scenario)
        except BaseException:
            session.abandon()
            raise
        self._session, self.run_folder = session, session.folder

    def _end_run(self, why: str) -> None:
        """Close the current run (RunSession.finish): the requests still in flight logged as
        unfinished, the footer, then report.json and the CSVs beside the log. The folder stays
        where it is. Without a runner (the engine failed mid-step) the log is closed without a
        footer (RunSession.abandon): its report says the run did not end cleanly."""
        session, self._run_to_log = self._session, None
        if session is None:
            return
        try:
            if self._runner is None:
                session.abandon()
            else:
                session.finish(ended_by=why, stopped_by=self._stopped_by)
        except (EngineError, OSError) as error:  # the log is on disk: `workbench report` rebuilds the rest
            self.events.failed(f"{session.folder}: the run's report files were not written ({error})")
        finally:
            self._session = None

    def _seconds(self) -> float:
        return self._backend.clock() - self._runner.start_time

    def _on_send(self, request_id: str, prompt_token_ids: list[int]) -> None:
        self.store.request_sent()
        self._requests.sent(request_id, self._runner.tags.get(request_id, ""), prompt_token_ids, self._seconds())

    def _on_update(self, update) -> None:
        if update.failure is not None:  # the core's policy: its requests ended with it, the engine goes on
            self.events.failed(f"{update.failure}; the requests in flight ended with this error, the engine goes on")
        if update.stats is not None:
            self.store.add_step(update.stats)
        if self._session is not None:
            self._session.update(update)
        if update.trace is not None and self.traces is not None:
            self.traces.add(update.trace)
        self._requests.updated(update, self._seconds())

    def _on_output(self, output) -> None:
        self._requests.output(output)  # the current run's rows: each Start has its own

    def _on_end(self, ended: EndedRequest) -> None:
        self.store.add_request(ended.metrics, ended.tag, ended.request_id)
        if self._session is not None:
            self._session.request_ended(ended)
        self._requests.ended(ended, self._seconds())

    def _at_rest_state(self) -> str:
        """The traffic state once every request sent has ended: "finished", or for a run stopped
        early, what it never sent."""
        result = self._runner.result
        if not result.interrupted:
            return "finished"
        return f"stopped early: {result.num_not_sent:,} planned requests never sent"

    def _refresh_if_due(self) -> None:
        """Waiting rows' states and the block map change without being scheduled; refresh them
        at a bounded rate rather than every step."""
        now = time.monotonic()
        if now - self._last_refresh >= _REFRESH_S:
            self._last_refresh = now
            self._requests.refresh()
