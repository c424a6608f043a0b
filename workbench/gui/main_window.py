"""The main window: controls on the left, live plots in the centre, requests, KV block map,
memory and runs in tabs below. It renders what the worker publishes and sends it commands; it
never touches the engine."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import ConfigError, EngineConfig, EngineError
from engine.configuration.memory import memory_lines, process_resident_bytes
from engine.execution.compile_cache import CompileProgress
from engine.simulation import SimulatedTarget, is_simulated
from engine.simulation.catalogue import hardware_profile
from workbench.analysis.compare import compare_folders, format_comparison
from workbench.analysis.explain import explain, request_history
from workbench.analysis.kv_capacity import kv_cache_note
from workbench.analysis.published import FIGURE_KINDS, stated_error
from workbench.analysis.report import incomplete_reasons
from workbench.backends.loader import EngineInfo, ServerInfo
from workbench.bench.run_files import open_run, save_run
from workbench.gui.arms_view import ArmsView
from workbench.gui.block_map import BlockMapView
from workbench.gui.charts.report_images import export_plot_images
from workbench.gui.elided_label import ElidedLabel
from workbench.gui.engine_panel import EnginePanel
from workbench.gui.engine_worker import EngineWorker
from workbench.gui.memory_panel import MemoryPanel
from workbench.gui.plots_view import PlotsView
from workbench.gui.requests_view import RequestsView
from workbench.gui.runs_panel import RunsPanel
from workbench.gui.step_panel import StepPanel, step_keys
from workbench.gui.sweep_view import SweepView
from workbench.gui.traffic_panel import TrafficPanel
from workbench.gui.why_view import WhyView
from workbench.live.live_metrics import LiveMetrics
from workbench.live.request_rows import ENDED_STATES
from workbench.live.session import WindowSession
from workbench.machine.process_tuning import freeze_loaded_heap
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.step_traces.store import TraceStore
from workbench.step_traces.text import format_request
from workbench.traffic.scenario import Scenario

ICON = Path(__file__).resolve().parents[2] / "assets" / "icon.svg"
PLOT_INTERVAL_MS = 50  # about 20 Hz, slower when frames are expensive (see refresh_plots)
PLOT_BUDGET = 0.2  # share of the time the GUI thread may spend drawing plots
TABLE_INTERVAL_MS = 500
# The stages a load reports, in order (engine/loading/, engine/llm_engine.py, the worker).
LOAD_STAGES = (
    "connect",
    "read file",
    "dequantize",
    "quantize",
    "calibrate activation smoothing",
    "allocate KV cache",
    "warm up",
    "prompt text",
)
PLOTS_MIN_HEIGHT = 380  # pixels: three rows of plots with their titles, axes and legends
PLOTS_PREFERRED_HEIGHT = 670  # every plot's data area at least 120 pixels (a test checks at 1280x800)
# Pixels a window manager adds around the window (borders; a title bar of about 30), kept free of
# the screen's available area when the window sizes itself.
WINDOW_FRAME_PX = (16, 40)
TABS_OPEN_HEIGHT = 220  # pixels: a tab opened (clicked, or shown by the window) gets at least this


def settings() -> QSettings:
    path = os.environ.get("WORKBENCH_SETTINGS", str(Path.home() / ".config" / "workbench" / "settings.ini"))
    return QSettings(path, QSettings.Format.IniFormat)


class MainWindow(QMainWindow):
    def __init__(self, worker: EngineWorker | None = None):
        super().__init__()
        self.setWindowTitle("Workbench — continuous batching, live")
        self.setWindowIcon(QIcon(str(ICON)))
        self.worker = worker or EngineWorker()
        self.info: EngineInfo | None = None
        self._decode_mode_shown = ""
        self._warming_shown = False  # the status line says "warming up": redrawn until it no longer does
        self._waiting_shown = ""  # the warm-up note the plots' titles show now
        self.session = WindowSession()  # which run the panes show, and what is selected (no Qt)
        self.tokenizer_decode = None
        self._closing = False
        self._arms_waiting: str | None = None  # a preset whose arms wait for the window's engine to be quiet
        self._centre_shared = False  # the plots and the tabs under them get their shares at the first show

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
        self.runs = RunsPanel(
            [
                ("Save run…", self.save_run),
                ("Open run…", self.open_run),
                ("Compare runs…", self.compare_runs),
                ("Back to live", self.back_to_live),
                ("Baseline…", self.open_baseline),
                ("Clear baseline", self.clear_baseline),
                ("Export plots…", self.export_plots),
            ]
        )
        self.runs.say(
            f"Each run is kept in a folder of its own under {self.worker.runs_dir} (its log, and its report "
            "files once it ends); a new run, Apply or closing the window removes none of them."
        )
        self._build_layout()
        self._build_status_bar()
        self._connect()
        self._restore_settings()

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

        self.tabs = QTabWidget()
        self.tabs.addTab(self.requests, "Requests")
        self.tabs.addTab(self.block_map, "KV block map")
        self.tabs.addTab(self.step_panel, "Step")
        step_keys(self.block_map, self.move_step)  # scrub while watching the map
        self.tabs.addTab(self.why, "Why")
        self.tabs.addTab(self.memory, "Memory")
        self.tabs.addTab(self.runs, "Runs")

        self.centre = centre = QSplitter(Qt.Orientation.Vertical)
        centre.addWidget(self.plots)
        centre.addWidget(self.tabs)
        # The plots keep room for their data whatever the tabs take (at 1280x800 they were about
        # 40 pixels tall, and a click that opened the Step tab made the tabs 45% of the height).
        # A window's height goes to the plots first, up to PLOTS_PREFERRED_HEIGHT (every data area
        # at least 120 pixels); the tabs take the rest and can be dragged shut (at 800x600).
        self.plots.setMinimumHeight(PLOTS_MIN_HEIGHT)
        centre.setCollapsible(0, False)
        centre.setCollapsible(1, True)
        centre.setStretchFactor(0, 1)
        centre.setStretchFactor(1, 0)
        self.tabs.setMinimumHeight(self.tabs.tabBar().sizeHint().height())  # at the least, the tab bar
        self.tabs.currentChanged.connect(self._open_tabs)
        self.tabs.tabBarClicked.connect(self._open_tabs)
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
        self._fit_to_screen(1480, 960)

    def showEvent(self, event) -> None:
        """At the first show, when the centre's height is known: the plots' share first."""
        super().showEvent(event)
        if not self._centre_shared:
            self._centre_shared = True
            QTimer.singleShot(0, self, self._share_centre)  # once the layout has given the centre its height

    def _share_centre(self) -> None:
        total = sum(self.centre.sizes())
        plots = min(PLOTS_PREFERRED_HEIGHT, total - self.tabs.minimumHeight())
        self.centre.setSizes([plots, total - plots])

    def _open_tabs(self, _index: int = -1) -> None:
        """A tab clicked or shown (a plot's click shows the Step tab; a sweep point the Why tab):
        the tabs get a height it can be used at, the plots keeping at least PLOTS_MIN_HEIGHT."""
        sizes = self.centre.sizes()
        total = sum(sizes)
        tabs = min(TABS_OPEN_HEIGHT, total - PLOTS_MIN_HEIGHT)
        if self._centre_shared and sizes[1] < tabs:
            self.centre.setSizes([total - tabs, tabs])

    def _fit_to_screen(self, width: int, height: int) -> None:
        """The preferred size, but never larger than the screen's available area less what a
        window manager adds around it (a 1280x800 laptop must still show the status bar, where
        every error appears: sized to the whole area, the title bar pushed it off the screen)."""
        screen = QGuiApplication.primaryScreen()
        if screen is not None:
            available = screen.availableGeometry()
            width = min(width, available.width() - WINDOW_FRAME_PX[0])
            height = min(height, available.height() - WINDOW_FRAME_PX[1])
        self.resize(width, height)

    def _build_status_bar(self) -> None:
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setMaximumWidth(260)
        self.stage = ElidedLabel("starting")
        # Errors cut at the window's edge changed their meaning ("went back to 2" for 256): elided,
        # whole in the tooltip, like the status line.
        self.error_label = ElidedLabel("", hide_when_empty=True)
        self.error_label.setStyleSheet("color: #e74c3c")
        self.traffic_label = QLabel("traffic: idle")
        self.cancel_button = QPushButton("Cancel load")
        self.cancel_button.setToolTip("Stop the load at its next stage; the engine loaded before keeps serving.")
        self.cancel_button.clicked.connect(self.worker.cancel_load)
        self.cancel_button.setVisible(False)
        bar = self.statusBar()
        bar.addWidget(self.stage, 1)  # what is left; "…" and the whole text in its tooltip past that
        bar.addWidget(self.progress)
        bar.addWidget(self.cancel_button)
        bar.addWidget(self.traffic_label)
        bar.addWidget(self.error_label, 1)

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
        panel.inject_requested.connect(worker.inject)
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
        self.error_label.setText("")
        self.progress.setValue(0)
        self.worker.load(config)

    def confirm_reload(self) -> bool:
        """Ask before dropping requests in flight (tests replace this)."""
        answer = QMessageBox.question(
            self, "Reload the engine?", "Requests are in flight; reloading drops them. Reload?"
        )
        return answer == QMessageBox.StandardButton.Yes

    def apply_config(self, config: EngineConfig) -> None:
        if self.worker.requests_in_flight() and not self.confirm_reload():
            return
        self.load(config)

    def confirm_new_run(self, in_flight: int, reload: bool = False) -> bool:
        """Ask before a new run aborts the last run's requests in flight; `reload`: the new run
        also loads other engine settings (tests replace this)."""
        answer = QMessageBox.question(
            self,
            "Start a new run?",
            f"{in_flight} requests of the current run are in flight. A new run aborts them"
            f"{' and loads its own engine settings' if reload else ''}; they end, aborted, in the current run's "
            "folder, which is kept. Start?",
        )
        return answer == QMessageBox.StandardButton.Yes

    def start_traffic(self, scenario: Scenario) -> None:
        """Start: the fields' traffic as a new run (asked first with requests in flight; "No"
        leaves everything, the preset's label too)."""
        if (in_flight := self.worker.requests_in_flight()) and not self.confirm_new_run(in_flight):
            return
        self.traffic_panel.hide_preset()
        self._begin_run(scenario)

    def _begin_run(self, scenario: Scenario) -> None:
        self.error_label.setText("")
        self.back_to_live()  # a new run has its own time axis, and the plots show it, not an opened run
        # Nothing of the last run stays on show: its request's detail ("decoding") and its Why.
        self.session.new_run()
        self.select_request(None)
        self.why.clear()
        self.worker.start_traffic(scenario)

    def confirm_drop_waiting(self, waiting: int) -> bool | None:
        """Stop with requests waiting: True drops them, False lets them run, None cancels the
        Stop (tests replace this)."""
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Stop the traffic",
            f"{waiting:,} requests sent are waiting for a step. Drop them too, or let them run to the end?",
            parent=self,
        )
        drop = box.addButton("Drop the waiting", QMessageBox.ButtonRole.DestructiveRole)
        keep = box.addButton("Let them run", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return {drop: True, keep: False}.get(box.clickedButton())

    def stop_traffic(self) -> None:
        """Send nothing more; with requests waiting (a queue of thousands at a high rate keeps the
        engine busy for minutes), offer to drop them."""
        drop = False
        if (waiting := self.worker.requests_waiting()) and (drop := self.confirm_drop_waiting(waiting)) is None:
            return
        self.worker.stop_traffic(drop_waiting=drop)

    def run_arms(self, preset: str) -> None:
        """Run both arms of a preset with variants, and show them side by side in the Arms view.
        They start once the window's own engine is quiet: its traffic or its decode graph's
        compile would share the cores with the arms and skew the comparison."""
        self.views.setCurrentWidget(self.arms)
        already_waiting = self._arms_waiting is not None
        self._arms_waiting = preset  # the latest choice, if a wait is already on
        if not already_waiting:
            self._start_arms_when_quiet()

    def _start_arms_when_quiet(self) -> None:
        if self._closing:
            return
        busy = self.warming_up() or ("its traffic is running" if not self.worker.at_rest() else "")
        if busy:
            self.arms.status.setText(
                f"waiting for the window's engine before running {self._arms_waiting}'s arms "
                f"({busy}; Stop ends the traffic)"
            )
            QTimer.singleShot(1000, self._start_arms_when_quiet)
            return
        preset, self._arms_waiting = self._arms_waiting, None
        self.arms.run_arms(preset)

    def run_preset(self, scenario: Scenario, label: str | None = None) -> None:
        """Load the preset's engine settings (if they differ) and run its traffic and events.
        `label`: how the preset is listed ("name / variant"); the panel shows what it runs. With
        requests in flight it asks first, before touching anything: "No" leaves the engine, the
        run, its requests, the panels and the log as they were."""
        reload = self.info is None or self.info.config != scenario.engine
        if (in_flight := self.worker.requests_in_flight()) and not self.confirm_new_run(in_flight, reload):
            return
        self.engine_panel.set_config(scenario.engine)
        if label is not None:
            self.traffic_panel.show_scenario(scenario, label)
        if reload:
            self.load(scenario.engine)
        self._begin_run(scenario)

    def on_loading(self, stage: str, fraction: float) -> None:
        """The stage in words; the bar for the whole load, not restarting at every stage: each stage
        an equal share, stages a configuration skips jumped over."""
        self.stage.setText(stage)
        if stage in LOAD_STAGES:
            done = (LOAD_STAGES.index(stage) + fraction) / len(LOAD_STAGES)
            self.progress.setValue(max(self.progress.value(), int(done * 100)))
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
        self.info = info  # first: the old EngineInfo holds the replaced engine, which the freeze must not keep
        self.cancel_button.setVisible(False)
        freeze_loaded_heap()
        self.tokenizer_decode = info.tokenizer.decode if info.tokenizer else None
        self.session.new_engine()
        self.plots.show_source(None)
        self.plots.set_capabilities(info.capabilities)
        self.plots.show_simulated_error([])  # until _show_memory says what a simulated GPU's times are worth
        self.progress.setValue(100)
        self.follow_live()  # the steps of another engine are gone
        if isinstance(info, ServerInfo):
            self.stage.setText(f"connected: {info.name}")
            self.memory.show_not_exposed(info.name)
            self.step_panel.show_not_exposed(
                f"{info.name}: a server keeps no record of what each step scheduled, "
                "allocated and freed (the in-process engine does)"
            )
            return
        if not info.capabilities.step_trace:
            self.step_panel.show_not_exposed("engine.step_trace is false in this configuration")
        self._show_engine_stage()
        self.stage.setToolTip(
            f"quantization: {info.quantization} ({info.quantization_choice})\nquality: {info.quality}"
        )
        self._show_memory(info)

    def _show_engine_stage(self) -> None:
        """The status line's engine: model, dtype, device, quantization and how decode runs now
        (a background compile changes it while the engine serves)."""
        info = self.info
        self._decode_mode_shown = info.decode_mode()
        kv = f", KV {info.kv_cache_dtype}" if info.kv_cache_dtype != info.dtype else ""
        warming = self.warming_up()
        self._warming_shown = bool(warming)
        self.stage.setText(
            f"ready: {Path(info.model_path).name} ({info.dtype}{kv}, {info.device}, {info.quantization}, "
            f"decode {self._decode_mode_shown})" + (f" — {warming}" if warming else "")
        )

    def warming_up(self) -> str:
        """While the decode graph compiles in the background the first steps run eagerly on cores
        the compiler shares, many times slower, so a run started now shows little for seconds:
        say so, and how much of the compile is left, rather than look frozen. "" once the compile
        has ended (or for a server)."""
        progress = self._compile_progress()
        if progress is None:
            return ""
        return f"warming up, {progress.describe()}; until then steps run eagerly and slowly"

    def _compile_progress(self) -> CompileProgress | None:
        return self.info.compile_progress() if isinstance(self.info, EngineInfo) else None

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
        self.cancel_button.setVisible(False)  # a failure ends the load it came from
        if not self.worker.has_backend():
            self.stage.setText("no engine loaded: apply a configuration")
        elif isinstance(self.info, EngineInfo):  # a failed load: the loading stages gave way to the engine kept
            self._show_engine_stage()
            self.progress.setValue(100)
        elif isinstance(self.info, ServerInfo):
            self.stage.setText(f"connected: {self.info.name}")
            self.progress.setValue(100)

    def _show_memory(self, info: EngineInfo) -> None:
        """The loaded device's memory, measured; or a simulated GPU's, every line an estimate."""
        summary, config = info.summary, info.config
        simulated = is_simulated(config.model)
        on_cpu = info.device.split(":")[0] == "cpu"
        lines = memory_lines(
            info.model_config,
            weight_bytes=summary["weight_bytes"],
            kv_cache_bytes=summary["kv_cache_bytes"],
            kv_blocks=summary["kv_blocks"],
            block_size=config.block_size,
            kv_bytes_per_token=summary["kv_bytes_per_token"],
            bytes_per_element=info.bytes_per_element,
            step_tokens=config.max_num_batched_tokens,
            max_seqs=config.max_num_seqs,
            resident_bytes=process_resident_bytes() if on_cpu and not simulated else None,
            weight_parts=summary.get("weight_parts"),
        )
        errors = [stated_error(summary["serving_stack"], kind) for kind in FIGURE_KINDS] if simulated else []
        self.plots.show_simulated_error(errors)
        if simulated:
            target = SimulatedTarget.parse(config.model)  # "4xh100-80gb": the group's memory, the lines its totals
            hardware, count, single = target.hardware, target.gpu_count, target.gpu
            lines = [dataclasses.replace(line, measured=False) for line in lines]
            group = f", {count} GPUs: TP {config.tensor_parallel_size} x PP {config.pipeline_parallel_size}"
            self.memory.show_lines(
                lines,
                count * hardware_profile(single).memory_bytes,
                f"{hardware} (simulated{group if count > 1 else ''})",
                per_gpu=info.per_gpu,
                timing=[error.phrase() for error in errors],
            )
        else:
            self.memory.show_lines(
                lines,
                info.device_memory_bytes,
                info.device,
                f"{info.quantization} — {info.quality}",
                kv_cache_note(info),
            )

    # ----- refresh -------------------------------------------------------------------------------

    def refresh_plots(self) -> None:
        store = self.worker.store
        if store is None or self.viewing_past_run:
            return
        new_store = self._live is None or self._live.store is not store  # a reload brings a new store
        if new_store:
            self._live = LiveMetrics(store)
        # While warming up the titles' seconds move: a redraw once a second, not on every tick.
        progress = self._compile_progress()
        waiting = ""
        if progress is not None:
            held = "<br>the run starts when it is warm" if self.worker.run_held() else ""
            waiting = f"warming up, {progress.time_so_far()}{held}"
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
        if self.viewing_past_run:
            return
        if isinstance(self.info, EngineInfo) and (
            self.info.decode_mode() != self._decode_mode_shown or self._warming_shown or self.warming_up()
        ):
            self._show_engine_stage()  # while warming up, its seconds move; once more when it ends
        self.requests.set_rows(self.worker.rows())
        if self.tabs.currentWidget() is self.block_map and self.selected_step is None:
            self.block_map.set_owners(self.worker.block_map(), caption="live", windowed=self.worker.window_blocks())

    # ----- the selected step ---------------------------------------------------------------------

    def _trace_source(self) -> tuple[TraceStore | None, float]:
        """The traces being looked at (the live engine's, or an opened run's) and the engine-clock
        time their run started (plot times count from it)."""
        if self.viewing_past_run:
            past = self.session.opened.past
            return past.store, past.start_time
        store = self.worker.store
        return self.worker.traces, store.start_time if store is not None else 0.0

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
        if self.selected_step is not None:
            self.select_step(self.selected_step + delta)

    def select_step(self, step: int) -> None:
        """Show one step: its trace in the Step panel, its time on every plot, the cache as it was."""
        traces, origin = self._trace_source()
        trace = traces.trace(step) if traces is not None else None
        if trace is None:
            kept = traces.step_range() if traces is not None else None
            self.statusBar().showMessage(
                f"step {step} is not kept"
                + (f" (steps {kept[0]}..{kept[1]} are; the run log has all)" if kept else ""),
                5000,
            )
            return
        self.session.select_step(step)
        self.step_panel.show_trace(trace, origin, traces.step_range())
        self.plots.set_cursor(trace.time_s - origin)
        self._show_block_map_at_step()

    def _show_block_map_at_step(self) -> None:
        traces, _ = self._trace_source()
        replay = traces.replay_at(self.selected_step)
        rows = (
            {row.request_id: index for index, row in enumerate(self.worker.rows())}
            if not self.viewing_past_run
            else self.session.opened.past.rows
        )
        highlighted = replay.blocks_of(self.selected_request) if self.selected_request else []
        self.block_map.set_owners(
            replay.owners(rows),
            highlighted,
            f"at step {self.selected_step} (Live returns to the run)",
            windowed=replay.windowed,
        )

    def select_request(self, request_id: str | None) -> None:
        """Show the request's row, timeline and causal history; mark its steps on the plots, its
        rows in the Step panel, its blocks in the map."""
        self.session.select_request(request_id)
        row = self.worker.row(request_id) if request_id else None
        self.requests.show_detail(row, self._request_history(row) if row is not None else "")
        traces, origin = self._trace_source()
        touched = traces.steps_touching(request_id) if traces is not None and request_id else []
        self.plots.set_request_steps([end - origin for _, end in touched])
        self.step_panel.highlight(request_id)
        if self.selected_step is not None:
            self._show_block_map_at_step()

    def _request_history(self, row) -> str:
        """`workbench trace --request`'s text for a row of the live run, from the steps between its
        arrival and its end."""
        traces, origin = self._trace_source()
        if traces is None or self.viewing_past_run or not row.timeline:
            return ""
        arrival = origin + row.timeline[0][0]
        end = (
            origin + row.timeline[-1][0] + 1.0 if row.state in ENDED_STATES else float("inf")
        )  # the ending step ends just before it is logged
        return format_request(traces.traces_between(arrival, end), row.request_id, arrival, origin)

    def follow_live(self) -> None:
        """Leave the selected step: no cursor, the block map follows the run."""
        self.session.follow_live()
        self.plots.set_cursor(None)
        self.step_panel.show_trace(None)
        self.block_map.set_owners(self.worker.block_map(), caption="live", windowed=self.worker.window_blocks())

    # ----- runs ----------------------------------------------------------------------------------

    def save_run(self, folder: str | None = None) -> Path | None:
        folder = folder or QFileDialog.getExistingDirectory(self, "Save the current run into")
        if not folder:
            return None
        target = Path(folder)
        try:
            log, report = save_run(target, self.worker.save_log_copy)
            export_plot_images(log, target)
        except EngineError as error:
            self.on_failed(f"save run: {error}")
            return None
        except OSError as error:
            self.on_failed(f"save run: {error.filename or target}: {error.strerror or error}")
            return None
        self.runs.say(f"saved to {target}\n\n{json.dumps(report['metrics'], indent=1)[:4000]}")
        return target

    def _read_run(self, folder: str, action: str, with_traces: bool = False):
        """A run folder's log and its replayed store, or None (and the reason in the status line)."""
        try:
            return open_run(Path(folder), with_traces)
        except EngineError as error:
            self.on_failed(f"{action}: {error}")
            return None

    def open_baseline(self, folder: str | None = None) -> None:
        """A past run (ours or a server's), faded under the live plots."""
        folder = folder or QFileDialog.getExistingDirectory(self, "A run folder to draw as the baseline")
        if not folder or (run := self._read_run(folder, "baseline")) is None:
            return
        log, store = run
        self.plots.set_baseline(store.snapshot(), Path(folder).name)
        self.runs.say(f"baseline: {folder} ({len(log.requests)} requests), drawn faded under the live plots")

    def export_plots(self, folder: str | None = None) -> list[Path]:
        folder = folder or QFileDialog.getExistingDirectory(self, "Export each plot (PNG, SVG, CSV) into")
        if not folder:
            return []
        try:
            written = self.plots.export(Path(folder))
        except OSError as error:
            self.on_failed(f"export plots: {folder}: {error.strerror or error}")
            return []
        self.runs.say(f"exported {len(written)} files into {folder}: " + ", ".join(path.name for path in written))
        return written

    def clear_baseline(self) -> None:
        self.plots.set_baseline(None)

    def open_run(self, folder: str | None = None) -> None:
        """A past run in the plots, its steps in the Step panel and the block map, until Back to live."""
        folder = folder or QFileDialog.getExistingDirectory(self, "Open a run folder")
        if not folder or (run := self._read_run(folder, "open run", with_traces=True)) is None:
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
        past = opened.past
        if past.store is None:
            self.step_panel.show_not_exposed(past.note)
        note = "\n".join(filter(None, [log.skipped_summary(Path(folder) / RUN_LOG_NAME), past.note]))
        finished = int((snapshot.requests["finished"] == 1).sum())
        state = (
            "complete"
            if not incomplete
            else f"incomplete: {'; '.join(incomplete)}; {finished} finished of {snapshot.goodput[1]} arrived"
        )
        self.runs.say(f"viewing {folder} ({state}); 'Back to live' returns" + (f"\n{note}" if note else ""))

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
        if self.viewing_past_run and settings:
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

    @property
    def viewing_past_run(self) -> bool:
        return self.session.viewing_past_run

    @property
    def selected_step(self) -> int | None:
        return self.session.selected_step

    @property
    def selected_request(self) -> str | None:
        return self.session.selected_request

    def compare_runs(self, baseline: str | None = None, candidate: str | None = None) -> None:
        baseline = baseline or QFileDialog.getExistingDirectory(self, "Baseline run folder")
        candidate = candidate or (baseline and QFileDialog.getExistingDirectory(self, "Candidate run folder"))
        if not baseline or not candidate:
            return
        try:
            result = compare_folders(baseline, candidate)
        except EngineError as error:
            self.on_failed(str(error))
            return
        self.runs.say(format_comparison(result))
        self.tabs.setCurrentWidget(self.runs)

    # ----- settings and closing ------------------------------------------------------------------

    def _restore_settings(self) -> None:
        stored = settings()
        geometry = stored.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
            self._fit_to_screen(self.width(), self.height())  # saved on a larger screen, or unframed
        saved = stored.value("engine_config")
        if saved:
            try:
                self.engine_panel.set_config(EngineConfig(**json.loads(saved)))
            except (ConfigError, TypeError, ValueError):
                pass  # settings from an older version: keep the defaults

    def closeEvent(self, event) -> None:
        """Save the settings, then stop the engine thread: a load stops at its next stage, a step
        in flight (a long prefill: seconds) is waited for, with the window still drawn and saying
        so rather than frozen without a word."""
        if self._closing:
            event.ignore()  # a second click on the close button while the first is waited for
            return
        self._closing = True
        stored = settings()
        stored.setValue("geometry", self.saveGeometry())
        try:
            stored.setValue("engine_config", json.dumps(dataclasses.asdict(self.engine_panel.config())))
        except ConfigError:
            pass
        stored.sync()
        self.plot_timer.stop()
        self.table_timer.stop()
        self.arms.stop()
        if not self.worker.shutdown(timeout_s=0.2):
            self.stage.setText("closing: waiting for the engine's step or load in progress to end…")
            self.error_label.setText("")
            while not self.worker.shutdown(timeout_s=0.05):
                QApplication.processEvents()
        super().closeEvent(event)
