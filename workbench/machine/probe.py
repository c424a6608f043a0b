"""A short probe of the machine's speed, taken at a run's start and end: is a difference between
two runs the configuration's doing, or the machine's?

This project's own measurements saw the development VM's speed drift by a third within an hour.
Each headless run records a copy bandwidth and a matrix-product rate (best of a few tries, about
0.2 s in all) before its first request and after its last; `machine_drift` compares two runs'
probes, and a comparison whose runs' machine differed by more than its smallest threshold widens
the intervals of its speed terms by that much (workbench/analysis/compare.py): the drift is uncertainty,
not the candidate's effect.
"""

from __future__ import annotations

import torch

from kernels.timing import timed_runs

_COPY_FLOATS = 16 << 20  # 64 MiB: past the caches, so it measures memory
_MATMUL_SIZE = 512
_TRIES = 5


def probe_machine() -> dict:
    """{"copy_gb_s", "matmul_gflop_s", "method"} of this machine now (CPU, or CUDA where the
    engine runs there)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    source = torch.empty(_COPY_FLOATS, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    copy_s = min(timed_runs(lambda: target.copy_(source), _TRIES))
    left = torch.randn(_MATMUL_SIZE, _MATMUL_SIZE, device=device)
    right = torch.randn(_MATMUL_SIZE, _MATMUL_SIZE, device=device)
    matmul_s = min(timed_runs(lambda: left @ right, _TRIES))
    return {
        "copy_gb_s": 2 * source.nbytes / copy_s / 1e9,  # read + write
        "matmul_gflop_s": 2 * _MATMUL_SIZE**3 / matmul_s / 1e9,
        "method": f"best of {_TRIES}: a 64 MiB float32 copy, a {_MATMUL_SIZE}^2 float32 product ({device.type})",
    }


def machine_drift(*reports: dict) -> float | None:
    """How far the machine's speed moved across these runs' probes (start and end of each): the
    largest max/min - 1 over both measures (0.12: 12%); None where a run has no probe."""
    probes = []
    for report in reports:
        taken = [probe for probe in (report.get("machine_probe") or {}).values() if isinstance(probe, dict)]
        if not taken:
            return None
        probes += taken
    return max(
        max(probe[measure] for probe in probes) / min(probe[measure] for probe in probes) - 1
        for measure in ("copy_gb_s", "matmul_gflop_s")
    )
