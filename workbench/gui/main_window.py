"""The main window: controls on the left, live plots in the centre, requests, KV block map,
memory and runs in tabs below. It renders what the worker publishes and sends it commands; it
never touches the engine."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QMainWindow,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import EngineConfig, EngineError
from workbench.analysis.explain import explain, request_history
from workbench.analysis.report import incomplete_reasons
from workbench.backends.loader import EngineInfo, ServerInfo
from workbench.gui import dialogs, window_settings
from workbench.gui.arms_view import ArmsView
from workbench.gui.block_map import BlockMapView
from workbench.gui.engine_panel import EnginePanel
from workbench.gui.engine_worker import EngineWorker
from workbench.gui.live_centre import LiveCentre
from workbench.gui.memory_panel import MemoryPanel
from workbench.gui.plots_view import PlotsView
from workbench.gui.requests_view import RequestsView
from workbench.gui.run_files_actions import RunFilesActions
from workbench.gui.runs_panel import RunsPanel
from workbench.gui.status_bar import build_status_bar
from workbench.gui.step_panel import StepPanel, step_keys
from workbench.gui.sweep_view import SweepView
from workbench.gui.traffic_panel import TrafficPanel
from workbench.gui.why_view import WhyView
from workbench.live.engine_status import EngineStatus, load_percent
from workbench.live.live_metrics import LiveMetrics
from workbench.live.memory_view import memory_view
from workbench.live.window_session import (
    WindowSession,
    live_request_history,
    opened_run_summary,
    step_not_kept,
)
from workbench.machine.process_tuning import freeze_loaded_heap
from workbench.runs.run_log import read_run_log
from workbench.step_traces.store import TraceStore
from workbench.traffic.scenario import Scenario

ICON = Path(__file__).resolve().parents[2] / "assets" / "icon.svg"
PLOT_INTERVAL_MS = 50  # about 20 Hz, slower when frames are expensive (see refresh_plots)
PLOT_BUDGET = 0.2  # share of the time the GUI thread may spend drawing plots
TABLE_INTERVAL_MS = 500


class MainWindow(QMainWindow):
    def __init__(self, worker: EngineWorker | None = None):
        super().__init__()
        self.setWindowTitle("Workbench — continuous batching, live")
        self.setWindowIcon(QIcon(str(ICON)))
        self.worker = worker or EngineWorker()
        self.status = EngineStatus()  # the status line's engine, and when to redraw it (no Qt)
        self._waiting_shown = ""  # the warm-up note the plots' titles show now
        self.session = WindowSession()  # which run the panes show, and what is selected (no Qt)
        self.tokenizer_decode = None
        self._closing = False
        self._preset_loading: tuple[Scenario, str] | None = None  # shown once its engine has loaded

        self.engine_panel = EnginePanel()
        self.traffic_panel = TrafficPanel()
        self.plots = PlotsView()
        self.requests = RequestsView(
            decode=lambda ids: self.tokenizer_decode(ids) if self.tokenizer_decode else str(ids)
        )
        self.block_map = BlockMapView()
        self.step_panel = StepPanel()
        self.memory = MemoryPanel()
        self.why = WhyView(
            history=lambda request_id: (
                request_history(self.session.explained, request_id) if self.session.explained else ""
            )
        )
        self.arms = ArmsView()
        self.arms.run_requested.connect(self.run_arms)
        self.sweep_view = SweepView()
        self.sweep_view.run_chosen.connect(self.open_sweep_point)
        self.run_files = files = RunFilesActions(
            self, self.worker, self.plots, lambda text: self.runs.say(text), self.on_failed
        )
        self.runs = RunsPanel(
            [
                ("Save run…", files.save_run),
                ("Open run…", self.open_run),
                ("Compare runs…", self.compare_runs),
                ("Back to live", self.back_to_live),
                ("Baseline…", files.open_baseline),
                ("Clear baseline", files.clear_baseline),
                ("Export plots…", files.export_plots),
            ]
        )
        self.runs.say(
            f"Each run is kept in a folder of its own under {self.worker.runs_dir} (its log, and its report "
            "files once it ends); a new run, Apply or closing the window removes none of them."
        )
        self._build_layout()
        self.progress, self.stage, self.error_label, self.traffic_label, self.cancel_button = build_status_bar(
            self.statusBar(), self.worker.cancel_load
        )
        self._connect()
        window_settings.restore(self, self.engine_panel)

        self._live: LiveMetrics | None = None  # the GUI thread's copy of the worker's store
        self.plot_timer = QTimer(self)
        self.plot_timer.setSingleShot(True)
        self.plot_timer.timeout.connect(self._plot_tick)
        self.plot_timer.start(PLOT_INTERVAL_MS)
        self.table_timer = QTimer(self)
        self.table_timer.timeout.connect(self.refresh_tables)
        self.table_timer.start(TABLE_INTERVAL_MS)
        self.worker.start()

    # ----- layout --------------------------------------------------------------------------------

    def _build_layout(self) -> None:
        controls = QWidget()
        controls_layout = QVBoxLayout(controls)
        controls_layout.addWidget(self.traffic_panel.presets_box)
        controls_layout.addWidget(self.engine_panel)
        controls_layout.addWidget(self.traffic_panel)
        controls_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(controls)
        scroll.setWidgetResizable(True)
        # As wide as the widest row (never cut, never a sideways scrollbar), with room for the
        # vertical scrollbar a 1280x800 screen needs.
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        controls_width = (
            controls.minimumSizeHint().width() + scroll.verticalScrollBar().sizeHint().width() + 2 * scroll.frameWidth()
        )
        scroll.setMinimumWidth(controls_width)

        self.centre = centre = LiveCentre(
            self.plots,
            [
                (self.requests, "Requests"),
                (self.block_map, "KV block map"),
                (self.step_panel, "Step"),
                (self.why, "Why"),
                (self.memory, "Memory"),
                (self.runs, "Runs"),
            ],
        )
        self.tabs = centre.tabs
        step_keys(self.block_map, self.move_step)  # scrub while watching the map
        # The centre: the live run (plots over tabs), or a preset's arms side by side, each with
        # the whole centre (the arms' table, under the plots, showed one row at 1280x800).
        self.views = QTabWidget()
        self.views.addTab(centre, "Live")
        self.views.addTab(self.arms, "Arms: two variants side by side")
        self.views.addTab(self.sweep_view, "Sweep")
        self.main_splitter = QSplitter()
        self.main_splitter.addWidget(scroll)
        self.main_splitter.addWidget(self.views)
        self.main_splitter.setCollapsible(0, False)
        self.main_splitter.setStretchFactor(1, 1)
        self.main_splitter.setSizes([controls_width, 1480 - controls_width])
        self.setCentralWidget(self.main_splitter)
        window_settings.fit_to_screen(self, 1480, 960)

    def _connect(self) -> None:
        worker = self.worker
        worker.loading.connect(self.on_loading)
        worker.loaded.connect(self.on_loaded)
        worker.failed.connect(self.on_failed)
        worker.traffic_state.connect(self.on_traffic_state)
        self.engine_panel.apply_requested.connect(self.apply_config)
        self.engine_panel.invalid.connect(self.on_failed)
        self.traffic_panel.invalid.connect(self.on_failed)
        panel = self.traffic_panel
        panel.start_requested.connect(self.start_traffic)
        panel.pause_requested.connect(worker.pause_traffic)
        panel.resume_requested.connect(worker.resume_traffic)
        panel.stop_requested.connect(self.stop_traffic)
        panel.inject_requested.connect(self.inject)
        panel.preset_chosen.connect(self.run_preset)
        self.requests.abort_requested.connect(worker.abort)
        self.plots.request_clicked.connect(self.show_request)
        self.requests.selection_changed.connect(self.select_request)
        self.plots.time_clicked.connect(self.select_time)
        self.plots.step_moved.connect(self.move_step)
        self.step_panel.step_requested.connect(self.select_step)
        self.step_panel.live_requested.connect(self.follow_live)
        self.why.explain_requested.connect(self.explain_current_run)
        self.why.request_chosen.connect(self.select_request)

    # ----- engine --------------------------------------------------------------------------------

    def load(self, config: EngineConfig) -> None:
        self._preset_loading = None  # this load replaces a preset's still loading
        self.error_label.setText("")
        self.progress.setValue(0)
        self.worker.load(config)

    # The questions the window asks (workbench/gui/dialogs.py); tests replace these.
    def confirm_reload(self) -> bool:
        return dialogs.confirm_reload(self)

    def confirm_new_run(self, in_flight: int, reload: bool = False) -> bool:
        return dialogs.confirm_new_run(self, in_flight, reload)

    def confirm_drop_waiting(self, waiting: int) -> bool | None:
        return dialogs.confirm_drop_waiting(self, waiting)

    def apply_config(self, config: EngineConfig) -> None:
        if self.worker.requests_in_flight() and not self.confirm_reload():
            return
        self.load(config)

    def start_traffic(self, scenario: Scenario) -> None:
        """Start: the fields' traffic as a new run (asked first with requests in flight; "No"
        leaves everything, the preset's label too)."""
        if (in_flight := self.worker.requests_in_flight()) and not self.confirm_new_run(in_flight):
            return
        self.traffic_panel.hide_preset()
        self._begin_run(scenario)

    def _begin_run(self, scenario: Scenario, with_load: bool = False) -> None:
        self.error_label.setText("")
        self.back_to_live()  # a new run has its own time axis, and the plots show it, not an opened run
        # Nothing of the last run stays on show: its request's detail ("decoding") and its Why.
        self.session.new_run()
        self.select_request(None)
        self.why.clear()
        self.worker.start_traffic(scenario, with_load)

    def inject(self, *request) -> None:
        self.error_label.setText("")  # an error from before: this injection is not what it was about
        self.worker.inject(*request)

    def stop_traffic(self) -> None:
        """Send nothing more; with requests waiting (a queue of thousands at a high rate keeps the
        engine busy for minutes), offer to drop them."""
        drop = False
        if (waiting := self.worker.requests_waiting()) and (drop := self.confirm_drop_waiting(waiting)) is None:
            return
        self.worker.stop_traffic(drop_waiting=drop)

    def run_arms(self, preset: str) -> None:
        """Both arms of a preset with variants, side by side in the Arms view, once the window's
        own engine is quiet."""
        self.views.setCurrentWidget(self.arms)
        self.arms.run_when_quiet(
            preset, lambda: self.status.warming_up() or ("its traffic is running" if not self.worker.at_rest() else "")
        )

    def run_preset(self, scenario: Scenario, label: str | None = None) -> None:
        """Load the preset's engine settings (if they differ) and run its traffic and events.
        `label`: how the preset is listed ("name / variant"); the panel shows what it runs. With
        requests in flight it asks first, before touching anything: "No" leaves the engine, the
        run, its requests, the panels and the log as they were."""
        reload = self.info is None or self.info.config != scenario.engine
        if (in_flight := self.worker.requests_in_flight()) and not self.confirm_new_run(in_flight, reload):
            return
        if reload:  # the panels show it once its engine has loaded: a refused load leaves them as they were
            self.load(scenario.engine)
            self._preset_loading = (scenario, label or scenario.name)
        else:
            self._show_preset(scenario, label or scenario.name)
        self._begin_run(scenario, with_load=reload)

    def _show_preset(self, scenario: Scenario, label: str) -> None:
        self.engine_panel.set_config(scenario.engine)
        self.traffic_panel.show_scenario(scenario, label)

    def on_loading(self, stage: str, fraction: float) -> None:
        """The stage in words; the bar for the whole load, not restarting at every stage: each stage
        an equal share, stages a configuration skips jumped over."""
        self.stage.setText(stage)
        if (percent := load_percent(stage, fraction)) is not None:
            self.progress.setValue(max(self.progress.value(), percent))
            self.cancel_button.setVisible(True)
        elif stage == "load cancelled":
            self.on_failed(
                "load cancelled: "
                + ("the engine loaded before keeps serving" if self.worker.has_backend() else "no engine is loaded")
            )
        else:  # "ready", or the previous engine's compile being stopped
            self.cancel_button.setVisible(stage != "ready")
            if stage == "ready":
                self.progress.setValue(100)

    def on_loaded(self, info: EngineInfo | ServerInfo) -> None:
        # No full collection walks the model, torch and Qt again while requests run. On this
        # thread: a collection in the engine thread finalised Qt objects and deadlocked the window.
        self.status.info = info  # first: the old EngineInfo holds the replaced engine, which the freeze must not keep
        if preset := self._preset_loading:
            self._show_preset(*preset)
        self._preset_loading, self.traffic_panel.applied_engine = None, info.config  # the next preset's base
        self.cancel_button.setVisible(False)
        freeze_loaded_heap()
        self.tokenizer_decode = info.tokenizer.decode if info.tokenizer else None
        self.session.new_engine()
        self.plots.show_source(None)
        self.plots.set_capabilities(info.capabilities)
        self.plots.show_simulated_error([])  # until _show_memory says what a simulated GPU's times are worth
        self.progress.setValue(100)
        self.follow_live()  # the steps of another engine are gone
        self.stage.setText(self.status.line())
        if isinstance(info, ServerInfo):
            self.memory.show_not_exposed(info.name)
            self.step_panel.show_not_exposed(
                f"{info.name}: a server keeps no record of what each step scheduled, "
                "allocated and freed (the in-process engine does)"
            )
            return
        if not info.capabilities.step_trace:
            self.step_panel.show_not_exposed("engine.step_trace is false in this configuration")
        self.stage.setToolTip(
            f"quantization: {info.quantization} ({info.quantization_choice})\nquality: {info.quality}"
        )
        view = memory_view(info)
        self.plots.show_simulated_error(view.simulated_errors)
        self.memory.show_view(view)

    @property
    def info(self) -> EngineInfo | ServerInfo | None:
        return self.status.info

    def on_traffic_state(self, state: str) -> None:
        self.traffic_label.setText(f"traffic: {state}")
        if state != "paused":  # the Pause button shows the state; it must not stay pressed after a Start or a reload
            button = self.traffic_panel.pause_button
            button.blockSignals(True)
            button.setChecked(False)
            button.blockSignals(False)

    def on_failed(self, message: str) -> None:
        """The message beside the status line; the status line itself says what is loaded, and
        changes only when nothing is (a later successful run must not read "error")."""
        self.error_label.setText(message)
        self._preset_loading = None  # a refused load: the panels keep the engine kept
        self.cancel_button.setVisible(False)  # a failure ends the load it came from
        # A failed load: the loading stages give way to the engine kept.
        if (line := self.status.after_failure(self.worker.has_backend())) is not None:
            self.stage.setText(line)
            self.progress.setValue(100 if self.worker.has_backend() else self.progress.value())

    # ----- refresh -------------------------------------------------------------------------------

    def refresh_plots(self) -> None:
        store = self.worker.store
        if store is None or self.session.viewing_past_run:
            return
        new_store = self._live is None or self._live.store is not store  # a reload brings a new store
        if new_store:
            self._live = LiveMetrics(store)
        # While warming up the titles' seconds move: a redraw once a second, not on every tick.
        waiting = self.status.plots_note(self.worker.run_held())
        whole = self.worker.at_rest() and not waiting
        if self._live.refresh() or new_store or waiting != self._waiting_shown or whole != self.plots.whole:
            self._waiting_shown = waiting
            self.plots.update_from(self._live.snapshot(), waiting=waiting, whole=whole)

    def _plot_tick(self) -> None:
        """Redraw, then wait long enough that drawing takes at most PLOT_BUDGET of the time: the
        GUI thread shares the GIL and the cores with the engine loop."""
        started = time.perf_counter()
        self.refresh_plots()
        spent_ms = (time.perf_counter() - started) * 1000
        self.plot_timer.start(max(PLOT_INTERVAL_MS, int(spent_ms / PLOT_BUDGET)))

    def show_request(self, request_id: str) -> None:
        """A latency point was clicked: its row in the requests table, and its timeline."""
        self.refresh_tables()  # a request that just ended may not be in the table yet
        self.tabs.setCurrentWidget(self.requests)
        if not self.requests.select(request_id):
            self.statusBar().showMessage(f"{request_id} is not in this run's requests table", 5000)

    def refresh_tables(self) -> None:
        if self.session.viewing_past_run:
            return
        if self.status.changed():
            self.stage.setText(self.status.line())  # while warming up, its seconds move; once more when it ends
        self.requests.set_rows(self.worker.rows())
        if self.tabs.currentWidget() is self.block_map and self.session.selected_step is None:
            self.block_map.set_owners(self.worker.block_map(), caption="live", windowed=self.worker.window_blocks())

    # ----- the selected step ---------------------------------------------------------------------

    def _trace_source(self) -> tuple[TraceStore | None, float]:
        store = self.worker.store
        return self.session.trace_source(self.worker.traces, store.start_time if store is not None else 0.0)

    def select_time(self, seconds: float) -> None:
        """A plot was clicked: the step nearest that time."""
        traces, origin = self._trace_source()
        step = traces.nearest_step(origin + seconds) if traces is not None else None
        if step is None:
            return
        self.select_step(step)
        if self.tabs.currentWidget() is not self.block_map:  # a user watching the map keeps it
            self.tabs.setCurrentWidget(self.step_panel)  # the plots keep their height: the panel scrolls

    def move_step(self, delta: int) -> None:
        if self.session.selected_step is not None:
            self.select_step(self.session.selected_step + delta)

    def select_step(self, step: int) -> None:
        """Show one step: its trace in the Step panel, its time on every plot, the cache as it was."""
        traces, origin = self._trace_source()
        trace = traces.trace(step) if traces is not None else None
        if trace is None:
            self.statusBar().showMessage(step_not_kept(step, traces), 5000)
            return
        self.session.select_step(step)
        self.step_panel.show_trace(trace, origin, traces.step_range())
        self.plots.set_cursor(trace.time_s - origin)
        self._show_block_map_at_step()

    def _show_block_map_at_step(self) -> None:
        traces, _ = self._trace_source()
        replay = traces.replay_at(self.session.selected_step)
        rows = self.session.block_map_rows([row.request_id for row in self.worker.rows()])
        highlighted = replay.blocks_of(self.session.selected_request) if self.session.selected_request else []
        self.block_map.set_owners(
            replay.owners(rows),
            highlighted,
            f"at step {self.session.selected_step} (Live returns to the run)",
            windowed=replay.windowed,
        )

    def select_request(self, request_id: str | None) -> None:
        """Show the request's row, timeline and causal history; mark its steps on the plots, its
        rows in the Step panel, its blocks in the map."""
        self.session.select_request(request_id)
        row = self.worker.row(request_id) if request_id else None
        traces, origin = self._trace_source()
        live = row is not None and not self.session.viewing_past_run
        self.requests.show_detail(row, live_request_history(traces, origin, row) if live else "")
        touched = traces.steps_touching(request_id) if traces is not None and request_id else []
        self.plots.set_request_steps([end - origin for _, end in touched])
        self.step_panel.highlight(request_id)
        if self.session.selected_step is not None:
            self._show_block_map_at_step()

    def follow_live(self) -> None:
        """Leave the selected step: no cursor, the block map follows the run."""
        self.session.follow_live()
        self.plots.set_cursor(None)
        self.step_panel.show_trace(None)
        self.block_map.set_owners(self.worker.block_map(), caption="live", windowed=self.worker.window_blocks())

    # ----- runs ----------------------------------------------------------------------------------

    def open_run(self, folder: str | None = None) -> None:
        """A past run in the plots, its steps in the Step panel and the block map, until Back to live."""
        folder = folder or QFileDialog.getExistingDirectory(self, "Open a run folder")
        if not folder or (run := self.run_files.read_run(folder, "open run", with_traces=True)) is None:
            return
        log, store = run
        try:  # all of it read before anything is switched: a log that fails leaves the window as it was
            opened = self.session.read_opened_run(Path(folder).name, log, self.why.above.value())
        except (EngineError, KeyError, TypeError, ValueError) as error:
            self.on_failed(f"open run: {folder}: its log cannot be shown ({type(error).__name__}: {error})")
            return
        self.follow_live()
        self.session.show_opened_run(opened)
        incomplete = incomplete_reasons(log)  # as report.json says: a run saved mid-run is incomplete
        snapshot = store.snapshot()
        self.plots.update_from(snapshot, whole=not incomplete)
        self.plots.show_source(opened.name)
        self.why.show_explanation(opened.explanation, opened.name)
        if opened.past.store is None:
            self.step_panel.show_not_exposed(opened.past.note)
        finished = int((snapshot.requests["finished"] == 1).sum())
        self.runs.say(opened_run_summary(folder, opened, incomplete, finished, snapshot.goodput[1]))

    def explain_current_run(self, above_percentile: float) -> None:
        """The Why tab for the run going on now, from its log as written so far."""
        try:
            if (path := self.worker.run_log_path) is None:
                raise EngineError("the current run has sent no request yet")
            log = read_run_log(path, with_traces=True)
        except EngineError as error:
            self.on_failed(f"explain: {error}")
            return
        self.session.explain_live(log)
        self.why.show_explanation(explain(log, above_percentile), "the current run")

    def open_sweep_point(self, folder: str, settings: str = "") -> None:
        """A sweep's point was clicked: its run in the Live view, labelled with its settings, its
        Why tab filled."""
        self.views.setCurrentIndex(0)
        self.open_run(folder)
        if self.session.viewing_past_run and settings:
            self.plots.show_source(f"{Path(folder).name}: {settings}")
        self.tabs.setCurrentWidget(self.why)

    def back_to_live(self) -> None:
        """The plots, the Step source, the Runs text and the Why tab leave an opened run."""
        if self.session.back_to_live():
            self.runs.say("back to the live run")
            self.why.clear()
            self.select_request(None)  # an id of the opened run would mark the live run's namesake
        self.follow_live()
        self.plots.show_source(None)
        self._live = None

    def compare_runs(self, baseline: str | None = None, candidate: str | None = None) -> None:
        if self.run_files.compare_runs(baseline, candidate):
            self.tabs.setCurrentWidget(self.runs)

    # ----- settings and closing ------------------------------------------------------------------

    def closeEvent(self, event) -> None:
        """Save the settings, then stop the engine thread: a load stops at its next stage, a step
        in flight (a long prefill: seconds) is waited for, with the window still drawn and saying
        so rather than frozen without a word."""
        if self._closing:
            event.ignore()  # a second click on the close button while the first is waited for
            return
        self._closing = True
        window_settings.save(self, self.engine_panel)
        self.plot_timer.stop()
        self.table_timer.stop()
        self.arms.stop()
        if not self.worker.shutdown(timeout_s=0.2):
            self.stage.setText("closing: waiting for the engine's step or load in progress to end…")
            self.error_label.setText("")
            while not self.worker.shutdown(timeout_s=0.05):
                QApplication.processEvents()
        super().closeEvent(event)
