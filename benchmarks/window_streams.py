"""The window driving a server with thousands of streams in flight (a measurement, not a test):

    python -m benchmarks.window_streams [--streams 2000] [--output-tokens 64]

Starts `workbench serve` on a simulated Llama-2-7B on an H100, in real time, on a loopback port;
opens the window (offscreen) on it as `workbench gui --server URL` does; injects N requests at
once from the window, and measures until they have all ended:

- in-flight streams (sent, not yet ended) at their peak, sampled every 0.25 s;
- how long the window stalls: a 20 ms heartbeat timer on the GUI thread, and how late each tick
  fires (p50 / p99 / max, with n ticks); a window that keeps up fires it late by a few ms;
- plot frame times (all five plots redrawn) and requests-table refresh times, p50 / p99, n;
- requests that ended with an error, and output tokens/s at the client.
"""

from __future__ import annotations

import argparse
import collections
import os
import time

import numpy as np

from benchmarks.server_processes import free_port, start_workbench_server

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SERVED_MODEL = "simulated:llama-3-8b@h100-80gb"  # a vocabulary (128,256) that holds the prompt tokenizer's ids
HEARTBEAT_MS = 20


def percentiles(values_ms: list[float]) -> str:
    values = np.asarray(values_ms)
    return (
        f"p50 {np.percentile(values, 50):.1f} ms, p99 {np.percentile(values, 99):.1f} ms, max {values.max():.1f} ms "
        f"(n={values.size})"
    )


def measure(streams: int, prompt_tokens: int, output_tokens: int, max_num_seqs: int) -> dict:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from engine import EngineConfig
    from workbench.gui.main_window import MainWindow

    port = free_port()
    server = start_workbench_server(
        port, "--set", f"engine.model={SERVED_MODEL}", "--set", f"engine.max_num_seqs={max_num_seqs}"
    )
    application = QApplication.instance() or QApplication([])
    window = MainWindow()
    try:
        window.resize(1280, 800)
        window.show()
        window.load(EngineConfig(model=f"http://127.0.0.1:{port}"))
        while window.info is None:
            application.processEvents()
            time.sleep(0.01)

        lateness_ms: list[float] = []
        last_tick = [time.perf_counter()]

        def heartbeat() -> None:
            now = time.perf_counter()
            lateness_ms.append(max(0.0, (now - last_tick[0]) * 1000 - HEARTBEAT_MS))
            last_tick[0] = now

        frame_ms: list[float] = []
        table_ms: list[float] = []

        def timed(refresh, times_ms: list[float]):
            def run() -> None:
                started = time.perf_counter()
                refresh()
                times_ms.append((time.perf_counter() - started) * 1000)

            return run

        window.refresh_plots = timed(window.refresh_plots, frame_ms)
        window.table_timer.timeout.disconnect()
        window.table_timer.timeout.connect(timed(window.refresh_tables, table_ms))
        timer = QTimer()
        timer.timeout.connect(heartbeat)
        timer.start(HEARTBEAT_MS)
        started = time.perf_counter()
        window.worker.inject(streams, prompt_tokens, output_tokens, "burst")
        peak_in_flight, next_sample = 0, started
        while True:
            application.processEvents()
            if time.perf_counter() >= next_sample:
                peak_in_flight = max(peak_in_flight, window.worker.requests_in_flight())
                if window.worker.requests_sent() == streams and window.worker.at_rest():
                    break
                next_sample += 0.25
            time.sleep(0.002)
        elapsed = time.perf_counter() - started
        timer.stop()
        rows = window.worker.rows()
        return {
            "peak_in_flight": peak_in_flight,
            "elapsed_s": elapsed,
            "lateness_ms": lateness_ms,
            "frame_ms": frame_ms,
            "table_ms": table_ms,
            "errors": collections.Counter(row.timeline[-1][1] for row in rows if row.state == "failed"),
            "output_tokens": sum(len(row.output_token_ids) for row in rows),
        }
    finally:
        window.close()
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument(
        "--max-num-seqs", type=int, default=256, help="the server's batch limit (the rest wait in its queue)"
    )
    args = parser.parse_args()
    result = measure(args.streams, args.prompt_tokens, args.output_tokens, args.max_num_seqs)
    print(
        f"{args.streams:,} requests ({args.prompt_tokens} prompt + {args.output_tokens} output tokens) injected at "
        "once from the "
        f"window into `workbench serve` ({SERVED_MODEL}, max_num_seqs {args.max_num_seqs}, real time), on loopback"
    )
    errors = result["errors"]
    print(f"  in-flight streams at peak: {result['peak_in_flight']:,}; ended with an error: {sum(errors.values())}")
    for message, count in errors.most_common(3):
        print(f"    {count} x {message[:200]}")
    print(
        f"  all ended after {result['elapsed_s']:.1f} s; {result['output_tokens'] / result['elapsed_s']:,.0f} output "
        "tok/s at the client"
    )
    print(f"  GUI thread, {HEARTBEAT_MS} ms heartbeat fired late by: {percentiles(result['lateness_ms'])}")
    print(f"  plot frame (five plots redrawn): {percentiles(result['frame_ms'])}")
    print(f"  requests table refresh: {percentiles(result['table_ms'])}")


if __name__ == "__main__":
    main()
