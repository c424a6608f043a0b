"""GUI performance, measured (a script, not a timed test):

    python -m benchmarks.window_frames

1. Frame update time: the five plots refreshed, as the window does, from a MetricsStore holding
   10,000 finished requests and 50,000 steps, then 100,000 and 500,000: p50 / p99 over 200
   frames, each bringing one new step and one newly finished request (goals: p99 under 30 ms and
   50 ms). A frame is the window's copy brought up to date, the plots updated and the repaint.
   The heap is frozen after the store is filled, as the window does once a model is loaded.
2. Engine throughput with the window attached vs headless, on the same workload, both timed
   from the moment the traffic starts until every request has ended, in counterbalanced pairs,
   the ratio with its 95% interval (goal: >= 90%). What the window costs the engine bounds what
   running the engine in a process of its own could give back. The window runs its own event
   loop meanwhile, as the app does. Each run is a process of its own, as the app and a headless
   run are: in one process, the headless runs' parallel work on the main thread started an OpenMP
   team there, and the window's engine then ran at two thirds of its speed (process_tuning.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def frame_times(frames: int = 200, requests: int = 10_000, steps: int = 50_000) -> list[float]:
    import numpy as np
    import pyqtgraph as pg

    from engine.requests.metrics import RequestMetrics, StepStats
    from workbench.gui.plots_view import PlotsView
    from workbench.live.live_metrics import LiveMetrics
    from workbench.live.metrics_store import MetricsStore
    from workbench.machine.process_tuning import freeze_loaded_heap

    application = pg.mkQApp()
    rng = np.random.default_rng(0)
    store = MetricsStore(
        0.0,
        kv_capacity_tokens=23_296,
        kv_cache_bytes=1 << 30,
        step_capacity=steps + frames,
        request_capacity=requests + frames,
    )
    step_span = 0.07  # seconds per step; a request ends every steps/requests steps

    def finish_request(index: int) -> None:
        end = index * step_span * steps / requests
        ttft = float(rng.lognormal(-1, 0.5))
        store.add_request(
            RequestMetrics(end - 3 - ttft, 100, end - 3 - ttft, end - 3, end, [end - 3, end], finish_reason="length"),
            "chat",
            f"chat-{index}",
        )

    for index in range(steps):
        store.add_step(
            StepStats(
                index * step_span,
                step_span,
                int(rng.integers(0, 512)),
                32,
                40,
                int(rng.integers(0, 1456)),
                1456,
                10,
                5,
                0,
                32,
                index // 1000,
                0,
                0,
                0,
            )
        )
    for index in range(requests):
        finish_request(index)
    view = PlotsView()
    view.resize(1400, 900)
    view.show()
    live = LiveMetrics(store)
    live.refresh()
    view.update_from(live.snapshot())
    application.processEvents()
    freeze_loaded_heap()
    times = []
    for frame in range(frames):
        store.add_step(
            StepStats((steps + frame) * step_span, step_span, 10, 32, 40, 700, 1456, 10, 5, 0, 32, 50, 0, 0, 0)
        )
        finish_request(requests + frame)
        begin = time.perf_counter()
        live.refresh()
        view.update_from(live.snapshot())
        application.processEvents()  # includes the repaint
        times.append(time.perf_counter() - begin)
    return times


def engine_throughput(with_window: bool, requests: int = 48, prompt: int = 64, output: int = 64) -> float:
    """Output tokens/s for `requests` arriving at once, ignore_eos, on the bundled model."""
    from PySide6.QtWidgets import QApplication

    from engine import EngineConfig
    from workbench.traffic.profile import LengthDistribution, TrafficProfile
    from workbench.traffic.scenario import Scenario

    # Compiled before the run: a background compile would take the cores during one of the pair.
    scenario = Scenario(
        name="perf",
        engine=EngineConfig(max_num_seqs=requests, compile_decode="blocking"),
        traffic=TrafficProfile(
            arrival="constant",
            rate=1e6,
            num_requests=requests,
            prompt_len=LengthDistribution(mean=prompt),
            output_len=LengthDistribution(mean=output),
        ),
    )
    if not with_window:
        from engine.llm_engine import LLMEngine
        from workbench.backends.local import LocalBackend
        from workbench.runs.runner import ScenarioRunner

        runner = ScenarioRunner(LocalBackend(LLMEngine(scenario.engine)), scenario)
        begin = time.perf_counter()
        result = runner.run()
        tokens = sum(request.metrics.num_output_tokens for request in result.requests)
        return tokens / (time.perf_counter() - begin)

    from workbench.gui.main_window import MainWindow
    from workbench.machine.process_tuning import no_parallel_work_on_this_thread

    no_parallel_work_on_this_thread()  # as `workbench gui` does
    _application = QApplication.instance() or QApplication([])
    window = MainWindow()
    window.show()
    wait_for(window.worker.loaded, lambda info: True, lambda: window.load(scenario.engine))
    begin = time.perf_counter()
    wait_for(window.worker.traffic_state, lambda state: state == "finished", lambda: window.start_traffic(scenario))
    elapsed = time.perf_counter() - begin
    tokens = sum(len(row.output_token_ids) for row in window.worker.rows())
    window.close()
    return tokens / elapsed


def wait_for(signal, accept, action) -> None:
    """Do `action`, then run the Qt event loop, as the app does, until `signal` brings a value
    `accept` takes (polling instead would itself take a share of the cores from the engine)."""
    from PySide6.QtCore import QEventLoop

    loop = QEventLoop()
    slot = lambda value: accept(value) and loop.quit()  # noqa: E731
    signal.connect(slot)
    action()
    loop.exec()
    signal.disconnect(slot)


def throughput_in_new_process(side: str) -> float:
    """engine_throughput in a fresh interpreter (module docstring): its last line of output."""
    finished = subprocess.run(
        [sys.executable, "-m", "benchmarks.window_frames", side], capture_output=True, text=True, check=True
    )
    return float(finished.stdout.split()[-1])


def main(pairs: int = 5) -> None:
    import numpy as np

    from benchmarks.paired_ratio import measure_pairs, paired_ratio

    for requests, steps in ((10_000, 50_000), (100_000, 500_000)):
        times = np.array(frame_times(requests=requests, steps=steps)) * 1000
        print(
            f"frame update with {requests:,} requests and {steps:,} steps: p50 {np.percentile(times, 50):.1f} ms, "
            f"p99 {np.percentile(times, 99):.1f} ms (n={times.size} frames)"
        )
    # Counterbalanced pairs (benchmarks/paired_ratio.py): the machine's speed drifts by 10% or
    # more between runs, so one pair says little.
    attached, headless = measure_pairs(
        lambda: throughput_in_new_process("attached"), lambda: throughput_in_new_process("headless"), pairs
    )
    print(
        f"engine output tok/s: GUI attached {', '.join(f'{rate:.0f}' for rate in attached)}; headless "
        f"{', '.join(f'{rate:.0f}' for rate in headless)} (48 requests x 64+64 tokens, the bundled model); "
        f"attached / headless {paired_ratio(attached, headless).text()}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:] in (["attached"], ["headless"]):
        print(engine_throughput(with_window=sys.argv[1] == "attached"))
    else:
        main()
