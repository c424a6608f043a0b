"""Start the desktop app: `workbench` or `workbench gui [--preset NAME [--variant V]] [--run-for S] [--screenshot F]
[--server URL [--served-model NAME] [--tokenizer MODEL] [--request-timeout S]]`."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from pathlib import Path

from engine import EngineConfig, EngineError
from workbench.backends.loader import SERVER_TOKENIZER, BackendLoader
from workbench.backends.remote import DEFAULT_REQUEST_TIMEOUT_S


def has_display() -> bool:
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    return bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or platform in ("offscreen", "minimal", "vnc")
    )


def baseline_problem(baseline: str | None) -> str | None:
    """Why the baseline cannot be drawn, found before the window opens."""
    if baseline is not None and not (Path(baseline) / "run.jsonl").is_file():
        return f"--baseline {baseline}: expected a run folder holding run.jsonl (a workbench bench --out folder)"
    return None


def screenshot_problem(screenshot: str | None, run_for_s: float | None) -> str | None:
    """Why the screenshot could not be saved, found before the model loads and the traffic runs."""
    if screenshot is None:
        return None
    if run_for_s is None:
        return "--screenshot needs --run-for SECONDS (the screenshot is taken when that time is up)"
    path = Path(screenshot)
    if path.suffix.lower() != ".png":
        return f"--screenshot {screenshot}: expected a .png file"
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        return f"--screenshot {screenshot}: the folder {folder} does not exist"
    if not os.access(folder, os.W_OK) or path.is_dir():
        return f"--screenshot {screenshot}: cannot write there"
    return None


def run_gui(
    preset: str | None = None,
    run_for_s: float | None = None,
    screenshot: str | None = None,
    server: str | None = None,
    served_model: str | None = None,
    tokenizer: str = SERVER_TOKENIZER,
    baseline: str | None = None,
    inspect_s: float | None = None,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    variant: str | None = None,
) -> int:
    """The window; with `preset` ("name", or "name / variant" as the window lists it), that
    preset run, or for a preset with variants and none chosen, both arms side by side in the Arms
    tab; with `server` (a URL), driving that server instead of an in-process engine: its model
    `served_model` (default: the first it lists), prompts made with `tokenizer`; with `baseline`
    (a run folder), that run drawn faded under the live plots; with `inspect_s`, the step at that
    time into the run shown in the Step panel when `run_for_s` is up."""
    problem = screenshot_problem(screenshot, run_for_s) or baseline_problem(baseline)
    if inspect_s is not None and run_for_s is None:
        problem = "--inspect needs --run-for SECONDS (the step is selected when that time is up)"
    if problem:
        print(f"workbench: {problem}", file=sys.stderr)
        return 2
    if not has_display():
        print(
            "workbench: no display found (DISPLAY is unset); run it on a desktop, under xvfb-run, "
            "or with QT_QPA_PLATFORM=offscreen for automation",
            file=sys.stderr,
        )
        return 2
    from workbench.gui.system_libraries import xcb_problem

    if (problem := xcb_problem()) is not None:
        print(f"workbench: {problem}", file=sys.stderr)
        return 2
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from workbench.gui.charts.theme import apply_theme
    from workbench.gui.engine_worker import EngineWorker
    from workbench.gui.main_window import MainWindow
    from workbench.machine.process_tuning import no_parallel_work_on_this_thread
    from workbench.traffic.presets import load_preset

    no_parallel_work_on_this_thread()  # the engine's worker thread has the cores' OpenMP team to itself
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Workbench")
    apply_theme()
    name, _, listed_variant = (preset or "").partition(" / ")
    variant = variant or listed_variant or None
    try:
        scenario = load_preset(name, variant=variant) if preset else None
    except EngineError as error:
        print(f"workbench: {error}", file=sys.stderr)
        return 2
    run_arms = scenario is not None and variant is None and len(scenario.variants) >= 2
    if run_arms and server:
        print(
            f"workbench: --server with {name}, a preset of variants: choose one with --variant "
            f"({', '.join(scenario.variants)}), or run workbench bench --preset {name} --server URL",
            file=sys.stderr,
        )
        return 2
    window = MainWindow(EngineWorker(loader=BackendLoader(served_model, tokenizer, request_timeout_s)))
    window.show()
    if baseline:
        window.open_baseline(baseline)
    outcome = {"code": 0}
    if run_arms:  # the window's own engine loads as usual; the arms run in a bench process
        window.load(window.engine_panel.config() if run_for_s is None else EngineConfig())
        window.run_arms(name)
    elif scenario is not None:
        if server:
            scenario = dataclasses.replace(scenario, engine=dataclasses.replace(scenario.engine, model=server))
        window.run_preset(scenario, f"{name} / {variant}" if variant else name)
    elif server:
        window.load(EngineConfig(model=server))
    else:
        window.load(window.engine_panel.config() if run_for_s is None else EngineConfig())

    if run_for_s is not None:

        def fail(message: str) -> None:
            print(f"workbench: {message}", file=sys.stderr)
            outcome["code"] = 1
            window.close()

        def finish() -> None:
            window.refresh_plots()
            window.refresh_tables()
            if inspect_s is not None:
                window.select_time(inspect_s)
            if screenshot and not window.grab().save(screenshot):
                outcome["code"] = 1
                print(f"workbench: could not write the screenshot {screenshot}", file=sys.stderr)
            window.close()

        window.worker.failed.connect(fail)
        if run_arms:  # the time is up once both arms have run
            window.arms.finished.connect(lambda ok: finish() if ok else fail(window.arms.status.text()))
        else:
            # The clock starts once the model is loaded, so --run-for measures traffic, not loading.
            window.worker.loaded.connect(lambda info: QTimer.singleShot(int(run_for_s * 1000), finish))
        if scenario is None:
            window.worker.loaded.connect(lambda info: window.start_traffic(window.traffic_panel.scenario()))
    close_on_ctrl_c(window)
    app.exec()
    # Tear the window down while Qt is still alive: left to interpreter shutdown, PySide6 and
    # pyqtgraph can destroy C++ objects in the wrong order and abort the process.
    window.deleteLater()
    app.processEvents()
    return outcome["code"]


def close_on_ctrl_c(window) -> None:
    """Ctrl+C closes the window as its close button does (the engine thread stopped, settings
    saved). Qt's event loop runs no Python while it waits, so Python's default handler only ran
    at the next event: a traceback, and the window kept running. A timer lets the interpreter
    look at signals every 200 ms."""
    from PySide6.QtCore import QTimer

    signal.signal(signal.SIGINT, lambda number, frame: window.close())
    window._signal_timer = QTimer(window)
    window._signal_timer.timeout.connect(lambda: None)
    window._signal_timer.start(200)
