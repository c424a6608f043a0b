"""The engine loop in its own thread, and the Qt adapter the window talks to.

The worker thread is the only code that touches the engine. The GUI sends commands through a
thread-safe queue, drained between steps; the loop writes metrics into a `MetricsStore` and
request rows / the block map into lock-guarded snapshots that the GUI reads on its timer.
Signals carry only rare events (load progress, loaded, errors), never per-step data, so a fast
engine cannot flood the event loop.
"""

from __future__ import annotations

import copy
import dataclasses
import queue
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PySide6.QtCore import QObject, Signal

from engine import EngineConfig, EngineError, LLMEngine
from engine.simulation import is_simulated
from workbench.headless import RUN_LOG_NAME, engine_summary, run_header
from workbench.metrics_store import MetricsStore
from engine.model_config import ModelConfig
from engine.model_file import ModelSource
from engine.model_source import read_model
from workbench.run_log import RunLogWriter
from workbench.runner import EndedRequest, ScenarioRunner
from workbench.scenario import SLO, Scenario
from engine.tokenizer import Tokenizer

BLOCK_FREE, BLOCK_CACHED, BLOCK_SHARED = -1, -2, -3
_REFRESH_S = 0.1  # how often waiting rows and the block map are refreshed


@dataclass
class RequestRow:
    request_id: str
    tag: str
    state: str
    prompt_token_ids: list[int]
    output_token_ids: list[int] = field(default_factory=list)
    queue_ms: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    preemptions: int = 0
    # (seconds since the run started, event), e.g. (1.20, "prefill 512 tokens")
    timeline: list[tuple[float, str]] = field(default_factory=list)


@dataclass
class EngineInfo:
    """What the window may know about the loaded engine (all immutable or thread-safe)."""

    config: EngineConfig
    summary: dict  # engine_summary(): capacity and byte counts, all measured
    dtype: str
    bytes_per_element: int
    device: str
    model_path: str
    model_config: ModelConfig
    tokenizer: Tokenizer | None  # decoding is thread-safe (the tokenizers library is immutable)
    decode_mode: str  # "compiled", "eager", "simulated", or why compilation fell back to eager


class EngineWorker(QObject):
    loading = Signal(str, float)  # stage, fraction done
    loaded = Signal(object)  # EngineInfo
    failed = Signal(str)  # a one-line message for the user
    traffic_state = Signal(str)  # "idle" (loaded), "running", "paused", "stopped", "finished"

    def __init__(self, runs_dir: Path | None = None):
        super().__init__()
        self.runs_dir = runs_dir or Path(tempfile.mkdtemp(prefix="workbench-runs-"))
        self.store: MetricsStore | None = None
        self.slo = SLO()
        self._commands: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._rows: dict[str, RequestRow] = {}
        self._live: dict[str, int] = {}  # unfinished request id -> its row number (block-map colour)
        self._block_map = np.empty(0, dtype=np.int64)
        self._engine: LLMEngine | None = None
        self._runner: ScenarioRunner | None = None
        self._source: ModelSource | None = None
        self._source_model: str | None = None
        self._log: RunLogWriter | None = None
        self._last_refresh = 0.0
        self._thread = threading.Thread(target=self._loop, name="engine-loop", daemon=True)

    # ----- GUI thread: commands ------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def load(self, config: EngineConfig) -> None:
        self._commands.put(("load", config))

    def start_traffic(self, scenario: Scenario) -> None:
        self._commands.put(("traffic", scenario))

    def pause_traffic(self) -> None:
        self._commands.put(("pause", None))

    def resume_traffic(self) -> None:
        self._commands.put(("resume", None))

    def stop_traffic(self) -> None:
        self._commands.put(("stop", None))

    def inject(self, count: int, prompt_tokens: int, output_tokens: int, tag: str) -> None:
        self._commands.put(("inject", (count, prompt_tokens, output_tokens, tag)))

    def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id))

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Stop traffic and the loop; True when the thread has ended. The loop reads commands
        between steps, so by default this waits for the step in flight (seconds, for a long
        prefill on a CPU): tearing the interpreter down under a running step aborts the process."""
        self._commands.put(("shutdown", None))
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # ----- GUI thread: snapshots -----------------------------------------------------------------

    def rows(self) -> list[RequestRow]:
        with self._lock:
            return [copy.copy(row) for row in self._rows.values()]

    def row(self, request_id: str) -> RequestRow | None:
        with self._lock:
            row = self._rows.get(request_id)
            return copy.deepcopy(row) if row else None

    def block_map(self) -> np.ndarray:
        with self._lock:
            return self._block_map.copy()

    @property
    def run_log_path(self) -> Path:
        return self.runs_dir / RUN_LOG_NAME

    def at_rest(self) -> bool:
        """Every request sent has ended and no traffic is left to send: the run so far is whole."""
        runner = self._runner
        return not self.has_requests_in_flight() and not (runner is not None and runner.traffic_pending)

    def has_requests_in_flight(self) -> bool:
        with self._lock:
            return any(row.state not in ("finished", "rejected", "aborted") for row in self._rows.values())

    # ----- worker thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        was_busy = False
        while True:
            busy = self._runner is not None and (self._engine.has_unfinished() or self._runner.traffic_pending)
            if was_busy and not busy and self._runner is not None:
                self.traffic_state.emit("finished")  # every request sent has ended, nothing is left to send
            was_busy = busy
            try:
                command, argument = self._commands.get(block=not busy, timeout=None if busy else 0.05)
            except queue.Empty:
                command = None
            if command == "shutdown":
                self._close_log()
                return
            try:
                if command is not None:
                    self._handle(command, argument)
                elif busy:
                    self._runner.tick()
                    self._refresh_if_due()
            except EngineError as error:
                self.failed.emit(str(error))
            except Exception as error:  # noqa: BLE001 - the loop must survive anything a step raises
                # The engine may be half-way through a step: drop it, stop its traffic and close the
                # run log without a footer (its report says incomplete); a new configuration reloads.
                engine_was_running = self._engine is not None
                self._engine, self._runner = None, None
                self._close_log()
                if engine_was_running:
                    self.traffic_state.emit("stopped")
                self.failed.emit(f"engine stopped: {type(error).__name__}: {error}. Apply a configuration to reload.")
                traceback.print_exc()

    def _handle(self, command: str, argument) -> None:
        if command == "load":
            self._load(argument)
            return
        if self._runner is None:
            raise EngineError("no model is loaded yet")
        if command == "traffic":
            # Each Start is a new run: its own time axis from zero, its own store and run log
            # (requests still in flight from the last run finish into the new one).
            self._runner.load_traffic(argument)
            self.slo = argument.slo
            self.store = self._new_store(self._engine, self._runner.start_time)
            self._open_log(dataclasses.asdict(argument))
            self.traffic_state.emit("running")
        elif command == "pause":
            self._runner.pause()
            self.traffic_state.emit("paused")
        elif command == "resume":
            self._runner.resume()
            self.traffic_state.emit("running")
        elif command == "stop":
            self._runner.stop_traffic()
            self.traffic_state.emit("stopped")
        elif command == "inject":
            self._runner.inject(*argument)
        elif command == "abort":
            self._engine.abort(argument)

    def _load(self, config: EngineConfig) -> None:
        self._engine, self._runner = None, None
        self._close_log()
        progress = self.loading.emit
        if is_simulated(config.model):
            # The window watches a simulated engine in real time, unless a speed was chosen.
            config = dataclasses.replace(config, simulation_speed=config.simulation_speed or 1.0)
        elif self._source is None or self._source_model != config.model:
            self._source = read_model(config.model, progress)
            self._source_model = config.model
        engine = LLMEngine(config, progress=progress, source=self._source)
        runner = ScenarioRunner(
            engine, None, on_step=self._on_step, on_request_end=self._on_end, on_output=self._on_output, on_send=self._track,
        )
        self.store = self._new_store(engine, runner.start_time)
        with self._lock:
            self._rows.clear()
            self._live.clear()
            self._block_map = np.full(engine.num_kv_blocks, BLOCK_FREE)
        self._engine, self._runner = engine, runner
        self._open_log({"name": "interactive", "engine": dataclasses.asdict(config), "slo": dataclasses.asdict(self.slo), "events": []})
        self.loading.emit("ready", 1.0)
        self.traffic_state.emit("idle")
        self.loaded.emit(EngineInfo(
            config=config, summary=engine_summary(engine), dtype=str(engine.dtype).removeprefix("torch."),
            bytes_per_element=torch.finfo(engine.dtype).bits // 8, device=str(engine.device),
            model_path=str(engine.model_path), model_config=engine.model_config, tokenizer=engine.tokenizer,
            decode_mode=engine.executor.decode_mode,
        ))

    def _new_store(self, engine: LLMEngine, start_time: float) -> MetricsStore:
        return MetricsStore(start_time, kv_capacity_tokens=engine.kv_capacity_tokens, kv_cache_bytes=engine.kv_cache_bytes, slo=self.slo)

    def _open_log(self, scenario: dict) -> None:
        """Each traffic run (and each load) starts a fresh run log, ready for "save run"."""
        self._close_log()
        if self.run_log_path.exists():
            self.run_log_path.unlink()
        self._log = RunLogWriter(self.run_log_path)
        scenario.setdefault("slo", dataclasses.asdict(self.slo))
        self._log.write("header", run_header(
            self._engine, scenario, variant=None, seed=scenario.get("seed", 0),
            requests_planned=self._runner.total_requests, start_time=self._runner.start_time,
        ))

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _seconds(self) -> float:
        return self._engine.clock() - self._runner.start_time

    def _track(self, request_id: str) -> None:
        """A row for every request the runner sends (rejected ones never get a sequence)."""
        seq = self._engine.sequence(request_id)
        with self._lock:
            self._rows[request_id] = RequestRow(
                request_id, self._runner.tags.get(request_id, ""), seq.state if seq else "rejected",
                list(seq.token_ids) if seq else [], timeline=[(self._seconds(), "arrived")],
            )
            if seq is not None:
                self._live[request_id] = len(self._rows) - 1

    def _on_step(self, step) -> None:
        self.store.add_step(step.stats)
        if self._log is not None:
            self._log.step(step.stats)
        now = self._seconds()
        with self._lock:
            for request_id, tokens in step.scheduled.items():
                row, seq = self._rows.get(request_id), self._engine.sequence(request_id)
                if row is None or seq is None:
                    continue
                if seq.metrics.preemptions > row.preemptions:
                    row.timeline.append((now, f"preempted (recompute {seq.num_tokens} tokens)"))
                row.preemptions, row.state = seq.metrics.preemptions, seq.state
                if tokens > 1 or seq.num_output_tokens == 0:
                    row.timeline.append((now, f"prefill {tokens} tokens"))
                elif not row.output_token_ids:
                    row.timeline.append((now, "decoding"))

    def _on_output(self, output) -> None:
        with self._lock:
            row = self._rows.get(output.request_id)
            if row is not None:
                row.output_token_ids.extend(output.new_token_ids)

    def _on_end(self, ended: EndedRequest) -> None:
        self.store.add_request(ended.metrics, ended.tag)
        if self._log is not None:
            self._log.request(ended.request_id, ended.tag, ended.metrics)
        metrics = ended.metrics
        with self._lock:
            self._live.pop(ended.request_id, None)
            row = self._rows.get(ended.request_id)
            if row is None:
                return
            row.state = {"abort": "aborted", "rejected": "rejected"}.get(metrics.finish_reason, "finished")
            row.queue_ms, row.ttft_ms, row.tpot_ms, row.e2e_ms = metrics.queue_time_ms, metrics.ttft_ms, metrics.tpot_ms, metrics.e2e_ms
            row.preemptions = metrics.preemptions
            detail = f": {metrics.finish_detail}" if metrics.finish_detail else ""
            row.timeline.append((self._seconds(), f"{row.state} ({metrics.finish_reason}{detail})"))

    def _refresh_if_due(self) -> None:
        """Waiting rows' states and the block map change without being scheduled; refresh them
        at a bounded rate rather than every step."""
        now = time.monotonic()
        if now - self._last_refresh < _REFRESH_S:
            return
        self._last_refresh = now
        manager = self._engine.block_manager
        owners = np.full(manager.num_blocks, BLOCK_FREE)
        with self._lock:
            for request_id, index in self._live.items():
                seq = self._engine.sequence(request_id)
                if seq is None:
                    continue
                self._rows[request_id].state = seq.state
                for block_id in seq.block_table:
                    owners[block_id] = BLOCK_SHARED if manager.blocks[block_id].ref_count > 1 else index
            for block in manager.blocks:
                if block.ref_count == 0 and block.prefix_hash is not None:
                    owners[block.block_id] = BLOCK_CACHED
            self._block_map = owners
