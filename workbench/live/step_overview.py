"""`StepOverview`: the per-step series the plots draw, with every series' minimum and maximum
kept at each power-of-two bin width as steps arrive. Drawing any time range then costs
O(points drawn), however long the run: the live window at 500,000 steps reads about a thousand
bins per line instead of decimating every step each frame.

A line is drawn from each bin's minimum and maximum in time order, so a one-step spike stays
visible at any zoom. Where the engine sat idle between two points drawn the line breaks (a NaN
between them), inside a bin too: a line ramping across idle time would show data that does not
exist (bins by step count once joined a bin's extremes across its gap). Each piece of line starts
at its first step's start, not its end: a step holds its value while it runs, and a step alone
between two gaps (slow steps beside a compile, far apart) is a dash as long as the step instead
of a point no line draws.
"""

from __future__ import annotations

import numpy as np

IDLE_GAP_S = 0.25  # a pause between two steps longer than this is idle time: the lines break there
MAX_LINE_POINTS = 2000  # a line gets at most this many points (two per bin)
FIRST_STORED_WIDTH = 16  # narrower bins are computed from the steps when drawn


class GrowableColumn:
    """A 1-D numpy array that appends in amortised O(1); `view()` is the filled part (no copy)."""

    def __init__(self, dtype=float):
        self._data = np.empty(1024, dtype=dtype)
        self.size = 0

    def extend(self, values) -> None:
        needed = self.size + len(values)
        if needed > self._data.size:
            grown = np.empty(max(needed, 2 * self._data.size), dtype=self._data.dtype)
            grown[: self.size] = self._data[: self.size]
            self._data = grown  # views handed out earlier keep the old buffer
        self._data[self.size : needed] = values
        self.size = needed

    def view(self) -> np.ndarray:
        return self._data[: self.size]


class _Bins:
    """Bins of one width: per series the step index of its minimum and of its maximum."""

    def __init__(self, series: tuple[str, ...]):
        self.low = {name: GrowableColumn(np.int64) for name in series}
        self.high = {name: GrowableColumn(np.int64) for name in series}
        self.size = 0


class StepOverview:
    """`extend(columns)` appends steps (every column of MetricsStore's steps); `line(name, x_range)`
    and `rises(counter, x_range)` read them back for drawing. At most `capacity` steps are kept:
    past it the older half is dropped and the bins are rebuilt, O(capacity) once per capacity/2
    steps."""

    def __init__(self, series: tuple[str, ...], counters: tuple[str, ...] = (), capacity: int = 200_000):
        self.series, self.counters, self.capacity = series, counters, capacity
        self._reset()

    def _reset(self) -> None:
        self.columns: dict[str, GrowableColumn] = {}
        # Idle gaps before this step and every one before it: a gap lies between steps a < b
        # when the counts at a and b differ.
        self.gaps_so_far = GrowableColumn(np.int64)
        self.levels: list[_Bins] = []  # widths FIRST_STORED_WIDTH, twice that, ...
        self._rises = {name: GrowableColumn(np.int64) for name in self.counters}  # steps where a counter went up

    @classmethod
    def of(cls, steps: dict[str, np.ndarray], series: tuple[str, ...], counters: tuple[str, ...] = ()) -> StepOverview:
        overview = cls(series, counters, capacity=max(len(steps["time_s"]), 1))
        overview.extend(steps)
        return overview

    @property
    def size(self) -> int:
        return self.gaps_so_far.size

    def column(self, name: str) -> np.ndarray:
        return self.columns[name].view() if name in self.columns else np.zeros(0)

    def extend(self, new: dict[str, np.ndarray]) -> None:
        count = len(new["time_s"])
        if count == 0:
            return
        if self.size + count > self.capacity:
            kept = max(self.capacity // 2, count)
            joined = (
                {name: np.concatenate([self.column(name), values])[-kept:] for name, values in new.items()}
                if self.columns
                else new
            )
            self._reset()
            new = {name: values[-kept:] for name, values in joined.items()}
        previous_end = self.column("time_s")[-1] if self.size else np.inf
        ends = np.concatenate([[previous_end], new["time_s"][:-1]])
        last_held = max(self.size - 1, 0)  # a counter's rise is read against the step before it
        before = self.gaps_so_far.view()[-1] if self.size else 0
        self.gaps_so_far.extend(before + np.cumsum(new["start_s"] - ends > IDLE_GAP_S))
        for name, values in new.items():
            self.columns.setdefault(name, GrowableColumn()).extend(values)
        for name in self.counters:
            totals = self.column(name)[last_held:]
            self._rises[name].extend(np.flatnonzero(np.diff(totals) > 0) + last_held + 1)
        self._extend_levels()

    def _extend_levels(self) -> None:
        complete = self.size // FIRST_STORED_WIDTH
        if not self.levels:
            self.levels.append(_Bins(self.series))
        first = self.levels[0]
        if complete > first.size:
            low, high = self._bins_from_steps(
                first.size * FIRST_STORED_WIDTH, complete * FIRST_STORED_WIDTH, FIRST_STORED_WIDTH
            )
            self._append(first, low, high)
        level = 0
        while self.levels[level].size >= 2:
            finer = self.levels[level]
            if level + 1 == len(self.levels):
                self.levels.append(_Bins(self.series))
            coarser = self.levels[level + 1]
            pairs = finer.size // 2
            if pairs > coarser.size:
                self._append(coarser, *self._merge(finer, 2 * coarser.size, 2 * pairs))
            level += 1

    @staticmethod
    def _append(bins: _Bins, low: dict, high: dict) -> None:
        for name in bins.low:
            bins.low[name].extend(low[name])
            bins.high[name].extend(high[name])
        bins.size += len(next(iter(low.values())))

    def _merge(self, finer: _Bins, start: int, stop: int) -> tuple[dict, dict]:
        """Pairs of finer bins [start, stop) as coarser bins."""
        low, high = {}, {}
        for name in self.series:
            values = self.column(name)
            lows = finer.low[name].view()[start:stop].reshape(-1, 2)
            highs = finer.high[name].view()[start:stop].reshape(-1, 2)
            low[name] = np.where(values[lows[:, 0]] <= values[lows[:, 1]], lows[:, 0], lows[:, 1])
            high[name] = np.where(values[highs[:, 0]] >= values[highs[:, 1]], highs[:, 0], highs[:, 1])
        return low, high

    def _bins_from_steps(
        self, start: int, stop: int, width: int, names: tuple[str, ...] | None = None
    ) -> tuple[dict, dict]:
        """Bins of `width` steps over [start, stop), the last one possibly shorter."""
        full = (stop - start) // width
        edges = list(range(start, start + full * width + 1, width)) if full else [start]
        if edges[-1] < stop:
            edges.append(stop)
        low, high = {}, {}
        for name in names or self.series:
            values = self.column(name)[start:stop]
            lows, highs = [], []
            if full:
                shaped = values[: full * width].reshape(full, width)
                lows.append(shaped.argmin(axis=1) + np.arange(full) * width)
                highs.append(shaped.argmax(axis=1) + np.arange(full) * width)
            if full * width < stop - start:  # the shorter last bin
                rest = values[full * width :]
                lows.append([full * width + int(rest.argmin())])
                highs.append([full * width + int(rest.argmax())])
            low[name] = np.concatenate(lows).astype(np.int64) + start if lows else np.zeros(0, np.int64)
            high[name] = np.concatenate(highs).astype(np.int64) + start if highs else np.zeros(0, np.int64)
        return low, high

    def index_range(self, x_range: tuple[float, float] | None) -> tuple[int, int]:
        """Steps to draw for a time range: those inside it and one either side, so lines reach the edges."""
        if x_range is None:
            return 0, self.size
        times = self.column("time_s")
        start = max(int(np.searchsorted(times, x_range[0], side="right")) - 1, 0)
        stop = min(int(np.searchsorted(times, x_range[1], side="left")) + 1, self.size)
        return start, stop

    def line(
        self, name: str, x_range: tuple[float, float] | None = None, max_points: int = MAX_LINE_POINTS
    ) -> tuple[np.ndarray, np.ndarray]:
        """(time_s, values) of one series over the range (None: the whole run), at most
        `max_points` points, plus each piece's start and the NaNs where the line breaks."""
        start, stop = self.index_range(x_range)
        count = stop - start
        if count <= 0:
            return np.zeros(0), np.zeros(0)
        if count <= max_points:
            steps = np.arange(start, stop)
            return self._points(name, steps, steps)
        # Bins aligned to multiples of their width (the stored ones are), few enough that the
        # two partial bins at the ends still fit.
        width = 1 << int(np.ceil(np.log2(count / (max_points // 2 - 2))))
        middle_start = min(-(-start // width) * width, stop)  # full bins from here
        middle_end = max(stop // width * width, middle_start)
        level = int(np.log2(width // FIRST_STORED_WIDTH)) if width >= FIRST_STORED_WIDTH else -1
        if 0 <= level < len(self.levels) and self.levels[level].size >= middle_end // width:
            bins, first_bin, end_bin = self.levels[level], middle_start // width, middle_end // width
            middle = (
                {name: bins.low[name].view()[first_bin:end_bin]},
                {name: bins.high[name].view()[first_bin:end_bin]},
            )
        else:
            middle = self._bins_from_steps(middle_start, middle_end, width, (name,))
        parts = (
            self._bins_from_steps(start, middle_start, width, (name,)),
            middle,
            self._bins_from_steps(middle_end, stop, width, (name,)),
        )
        low = np.concatenate([part[0][name] for part in parts])
        high = np.concatenate([part[1][name] for part in parts])
        return self._points(name, low, high)

    def _points(self, name: str, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each bin's extremes in time order; where an idle gap lies between two of them, a NaN,
        and the piece after it starts at its first step's start."""
        pairs = np.stack([np.minimum(low, high), np.maximum(low, high)], axis=1)
        steps = pairs.ravel()[np.stack([np.ones(len(pairs), bool), pairs[:, 1] != pairs[:, 0]], axis=1).ravel()]
        gaps = self.gaps_so_far.view()[steps]
        piece_starts = np.ones(steps.size, bool)
        piece_starts[1:] = gaps[1:] != gaps[:-1]
        x, y = np.full((steps.size, 3), np.nan), np.full((steps.size, 3), np.nan)
        x[:, 1], x[:, 2] = self.column("start_s")[steps], self.column("time_s")[steps]
        y[:, 1] = y[:, 2] = self.column(name)[steps]
        keep = np.ones((steps.size, 3), bool)
        keep[:, 0] = piece_starts
        keep[:1, 0] = False  # the first piece needs no break before it
        keep[:, 1] = piece_starts
        return x[keep], y[keep]

    def rises(
        self, counter: str, x_range: tuple[float, float] | None = None, max_points: int = MAX_LINE_POINTS
    ) -> np.ndarray:
        """Times in the range at which a cumulative counter went up, evenly thinned to `max_points`."""
        start, stop = self.index_range(x_range)
        steps = self._rises[counter].view()
        steps = steps[np.searchsorted(steps, start) : np.searchsorted(steps, stop)]
        if steps.size > max_points:
            steps = steps[:: -(-steps.size // max_points)]
        return self.column("time_s")[steps]
