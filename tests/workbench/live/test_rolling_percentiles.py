"""The latency plot's rolling percentiles: each evaluated point covers exactly the window of
requests that ends at it."""

from __future__ import annotations

import numpy as np

from workbench.live.rolling_percentiles import MAX_ROLLING_POINTS, ROLLING_WINDOW, rolling_index, rolling_percentiles


def test_rolling_percentiles_cover_the_last_window_ending_at_each_point():
    values = np.arange(1.0, 301.0)
    points = rolling_index(values.size)
    assert points[0] == 0 and points[-1] == 299
    rolling = rolling_percentiles(values)
    for column, index in enumerate(points):
        window = values[max(0, index - ROLLING_WINDOW + 1) : index + 1]
        np.testing.assert_allclose(rolling[:, column], np.percentile(window, [50, 90, 99]))
    assert rolling[0, -1] == 250.5  # the median of requests 201..300


def test_rolling_points_are_capped_and_an_empty_series_has_none():
    assert rolling_index(0).tolist() == [] and rolling_index(0).dtype.kind == "i"
    assert rolling_percentiles(np.array([])).shape == (3, 0)
    assert rolling_index(50).tolist() == list(range(50))  # every request while there are few
    assert rolling_index(10_000).size == MAX_ROLLING_POINTS and rolling_index(10_000)[-1] == 9_999
    single = rolling_percentiles(np.array([7.0]))
    assert single.shape == (3, 1) and single[:, 0].tolist() == [7.0, 7.0, 7.0]
