"""Rolling latency percentiles for the latency plot: p50/p90/p99 over the last ROLLING_WINDOW
requests, evaluated at up to MAX_ROLLING_POINTS evenly spaced requests. Plain numpy, no Qt, so
that tests and mutation testing reach it without a window."""

from __future__ import annotations

import numpy as np

ROLLING_WINDOW = 100  # requests behind each rolling percentile point
MAX_ROLLING_POINTS = 200  # rolling percentiles are evaluated at most this often along the axis


def rolling_index(n: int) -> np.ndarray:
    """Indices (into the n values) where rolling percentiles are evaluated."""
    return np.unique(np.linspace(0, n - 1, min(n, MAX_ROLLING_POINTS)).astype(int)) if n else np.array([], dtype=int)


def rolling_percentiles(values: np.ndarray) -> np.ndarray:
    """p50/p90/p99 of the (up to) ROLLING_WINDOW values ending at each evaluated index: [3, points]."""
    n = values.size
    if n == 0:
        return np.empty((3, 0))
    indices = rolling_index(n)
    out = np.empty((3, indices.size))
    full = indices >= ROLLING_WINDOW - 1
    if full.any():  # one vectorised call for all full windows
        windows = np.lib.stride_tricks.sliding_window_view(values, ROLLING_WINDOW)[indices[full] - ROLLING_WINDOW + 1]
        out[:, full] = np.percentile(windows, [50, 90, 99], axis=1)
    for column in np.flatnonzero(~full):  # the first, shorter windows
        out[:, column] = np.percentile(values[: indices[column] + 1], [50, 90, 99])
    return out
