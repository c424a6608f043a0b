"""What the window's tests share: load a configuration and wait for it, whether every request of
the run has ended, and a metrics store filled with steps and requests for the plots."""

from __future__ import annotations

from pathlib import Path

from engine.requests.metrics import RequestMetrics, StepStats
from workbench.live.metrics_store import MetricsStore
from workbench.traffic.scenario import SLO


def load(window, qtbot, config) -> None:
    window.load(config)
    qtbot.waitUntil(
        lambda: window.info is not None and window.info.config == config and window.progress.value() == 100,
        timeout=30_000,
    )


def save_run(window, qtbot, folder) -> Path | None:
    """Save run… into `folder` and wait for it: the folder once saved, None when it failed."""
    target = window.run_files.save_run(str(folder))
    qtbot.waitUntil(lambda: window.run_files.saving is None, timeout=60_000)
    return target if window.run_files.last_saved == target else None


def inject(window, count: int, prompt_tokens: int, output_tokens: int, tag: str) -> None:
    """As the Inject box does: `count` requests now, a run of injects judged by the SLO fields."""
    window.traffic_panel.inject_requested.emit(count, prompt_tokens, output_tokens, tag, window.traffic_panel.slo())


def all_ended(window) -> bool:
    rows = window.worker.rows()
    return bool(rows) and all(row.state in ("finished", "aborted", "rejected") for row in rows)


def filled_store(steps: int = 300, requests: int = 200) -> MetricsStore:
    store = MetricsStore(0.0, kv_capacity_tokens=1024, kv_cache_bytes=2**20, slo=SLO(ttft_ms=60.0))
    for index in range(steps):
        store.add_step(StepStats(index * 0.1, 0.1, 10, 5, 5, 30, 64, 2, 4, 0, 3, index // 50, 0, 0, 0))
    for index in range(requests):
        start = index * 0.1
        store.add_request(
            RequestMetrics(
                start,
                5,
                start,
                start + 0.05 + 0.0005 * index,
                start + 0.3,
                [start + 0.05 + 0.0005 * index, start + 0.2, start + 0.3],
                finish_reason="length",
            ),
            "chat",
        )
    return store
