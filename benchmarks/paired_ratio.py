"""A ratio against a peer on a machine whose speed drifts: counterbalanced pairs, and the ratio
with its 95% interval and n.

This machine's speed moved by a third within an hour (vLLM's own single stream made 33, 51 and
21 tok/s in three runs of one day), so one measurement of each side cannot call a ratio near 1.0
either way. Pair k measures ours first when k is even and the peer first when it is odd (ours,
peer, peer, ours, ...): a drift that is steady over two pairs favours neither side. The ratio is
the geometric mean of the pairs' ratios, its interval Student's t over their logarithms
(`workbench.analysis.intervals.change_over_repeats`, what `bench --repeat` uses); its coverage at 3 and 5
pairs is tested against known distributions (tests/test_paired_ratio.py). A target
counts as met only when the whole interval lies past it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from workbench.analysis.intervals import change_over_repeats

T = TypeVar("T")

MIN_PAIRS = 3  # two pairs give a t interval with 1 degree of freedom: 12.7 standard errors wide


@dataclass(frozen=True)
class PairedRatio:
    ratio: float  # ours / the peer's, the geometric mean over the pairs
    low: float
    high: float
    pairs: int

    def text(self) -> str:
        """E.g. "0.92x [0.85, 0.99], n = 5 pairs"."""
        return f"{self.ratio:.2f}x [{self.low:.2f}, {self.high:.2f}], n = {self.pairs} pairs"

    def against(self, target: float, higher_is_better: bool = True) -> str:
        """ "met" when the whole interval lies past `target` (above it for a rate, below it for a
        time: `higher_is_better=False`), "missed" when it lies on the wrong side, "undecided" when
        it holds the target."""
        above, below = self.low > target, self.high < target
        if above or below:
            return "met" if above == higher_is_better else "missed"
        return "undecided"


def measure_pairs(ours: Callable[[], T], peer: Callable[[], T], pairs: int) -> tuple[list[T], list[T]]:
    """(ours, the peer's) results of `pairs` counterbalanced pairs (module docstring): rates, or
    whole run reports to take several figures from."""
    if pairs < MIN_PAIRS:
        raise ValueError(f"pairs: expected at least {MIN_PAIRS} (an interval needs them), got {pairs}")
    our_values, peer_values = [], []
    for pair in range(pairs):
        if pair % 2 == 0:
            our_values.append(ours())
            peer_values.append(peer())
        else:
            peer_values.append(peer())
            our_values.append(ours())
    return our_values, peer_values


def paired_ratio(our_values: list[float], peer_values: list[float]) -> PairedRatio:
    """Ours over the peer's, pair by pair (positive values: rates, or times inverted first)."""
    change = change_over_repeats(peer_values, our_values, relative=True)
    if change is None:
        raise ValueError(f"a paired ratio needs at least 2 pairs of positive values, got {our_values} / {peer_values}")
    log_ratios = [math.log(ours / peer) for ours, peer in zip(our_values, peer_values)]
    ratio = math.exp(sum(log_ratios) / len(log_ratios))
    return PairedRatio(ratio, 1 + change.low, 1 + change.high, len(log_ratios))
