"""The latency plot's rolling percentiles: each evaluated point covers exactly the window of
requests that ends at it."""

from __future__ import annotations

import numpy as np

from workbench.rolling_percentiles import ROLLING_WINDOW, rolling_index, rolling_percentiles


def test_rolling_percentiles_cover_the_last_window_ending_at_each_point():
    values = np.arange(1.0, 301.0)
    points = rolling_index(values.size)
    assert points[0] == 0 and points[-1] == 299
    rolling = rolling_percentiles(values)
    for column, index in enumerate(points):
        window = values[max(0, index - ROLLING_WINDOW + 1): index + 1]
        np.testing.assert_allclose(rolling[:, column], np.percentile(window, [50, 90, 99]))
    assert rolling[0, -1] == 250.5  # the median of requests 201..300
