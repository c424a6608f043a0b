"""Whether a decision's evidence carries it: accept, reject or inconclusive.

Each term of a decision (an intended change or a tolerated regression, `workbench.analysis.compare.Criterion`)
is judged on the interval of the change it names, candidate against baseline:

- an intended change is **reached** when its whole interval lies strictly past the threshold,
  **short** when its whole interval lies at or short of it (a zero change is never a gain, not
  even against "any gain", -0%), otherwise **uncertain**;
- a tolerated regression is **crossed** when its whole interval lies strictly beyond the bound,
  **within** when its whole interval lies strictly inside it (or is a single value no further
  than the bound: a deterministic figure that did not move), otherwise **uncertain**.

A side of an interval the data cannot bound (a p99 of 20 requests has no upper bound) is
infinite: a term that needs it is uncertain, and its note says what would bound it. The interval
is a 95% one whose coverage at that n has been shown (workbench/analysis/intervals.py), so the verdict
claims that much and no more.

The verdict: **accept** when every intended change is reached and no tolerated bound is crossed
(an uncertain tolerated term is named in the verdict); **reject** when an intended change is
short or a tolerated bound is crossed; otherwise **inconclusive**, with why (each open term's
note) and an estimate of the repeats that would decide it (an interval narrows as one over the
square root of the runs). A term on a tag's requests (`chat/ttft_p50_ms`) whose n is under
`MIN_SUBGROUP_REQUESTS` in either run is not judged: it is uncertain, and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.analysis.intervals import Interval

# A tag's figures from fewer requests than this are not used for a verdict.
MIN_SUBGROUP_REQUESTS = 10
# Beyond this many paired repeats an estimate of how many would decide a term is not advice.
PRACTICAL_REPEATS = 100

REACHED, SHORT, WITHIN, CROSSED, UNCERTAIN = "reached", "short", "within", "crossed", "uncertain"


@dataclass(frozen=True)
class Term:
    """One decision term with its evidence: the change's point estimate and interval (relative
    changes as fractions, absolute ones in the metric's unit)."""

    kind: str  # "intended" or "tolerated"
    criterion: str  # as declared, e.g. "tpot_p50_ms:-10%"
    threshold: float  # signed
    relative: bool
    estimate: float | None
    interval: Interval | None
    runs: int  # pairs of runs behind the estimate
    n_baseline: int  # requests (or steps) behind the figure, per run
    n_candidate: int
    subgroup: bool = False  # the metric is a tag's
    unit: str = ""  # the metric's: an absolute change is in it
    caveat: str = ""  # what else the reader must know, e.g. the interval widened by the machine's drift
    # One pair of runs on a real machine: the interval leaves out the run-to-run noise, so it decides nothing.
    needs_repeats: bool = False

    @property
    def status(self) -> str:
        if self.interval is None or self.estimate is None or self._too_few_requests or self.needs_repeats:
            return UNCERTAIN
        # Oriented so that "further in the threshold's direction" is larger; an unbounded side is infinite.
        direction = math.copysign(1.0, self.threshold)
        low = -math.inf if self.interval.low is None else self.interval.low
        high = math.inf if self.interval.high is None else self.interval.high
        nearest, furthest = sorted((direction * low, direction * high))
        bound = direction * self.threshold
        if self.kind == "intended":
            return REACHED if nearest > bound else SHORT if furthest <= bound else UNCERTAIN
        inside = furthest < bound or (nearest == furthest and furthest <= bound)
        return CROSSED if nearest > bound else WITHIN if inside else UNCERTAIN

    @property
    def _too_few_requests(self) -> bool:
        return self.subgroup and min(self.n_baseline, self.n_candidate) < MIN_SUBGROUP_REQUESTS

    @property
    def note(self) -> str:
        if self.estimate is None:
            reason = "not measurable in both runs"
        elif self._too_few_requests:
            reason = (
                f"too few requests in this tag (n {self.n_baseline}/{self.n_candidate}, under "
                f"{MIN_SUBGROUP_REQUESTS}): not judged"
            )
        elif self.interval is None:
            reason = "no interval for a change of this figure over one pair of runs: repeat the runs (--repeat)"
        elif self.needs_repeats:
            reason = (
                "one pair of runs on a real machine: its interval covers the requests' noise, not the runs' "
                "(an A/A on this machine showed a 38% TPOT 'gain' from one pair): repeat the runs (--repeat 3 or more)"
            )
        else:
            reason = ""
        return "; ".join(part for part in (reason, self.caveat) if part)

    def repeats_needed(self) -> int | None:
        """About how many paired repeats would move an uncertain term's interval off its threshold
        (its half-width shrinking as 1/sqrt(runs)); None where no estimate can be made."""
        if self.status != UNCERTAIN or self.interval is None or self.estimate is None or self._too_few_requests:
            return None
        if self.needs_repeats:
            return None  # the note says it: repeats, 3 or more
        distance = abs(self.estimate - self.threshold)
        if distance == 0 or not self.interval.identified:  # more requests per run, not more runs, would bound it
            return None
        needed = self.runs * (self.interval.half_width / distance) ** 2
        return max(self.runs + 1, math.ceil(needed - 1e-9))  # 1e-9: 9.000000000000002 is 9

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "criterion": self.criterion,
            "relative": self.relative,
            "unit": self.unit,
            "estimate": self.estimate,
            "interval": None if self.interval is None else self.interval.as_dict(),
            "status": self.status,
            "runs": self.runs,
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "repeats_needed": self.repeats_needed(),
            "note": self.note,
        }


def repeats_needed_text(needed: int) -> str:
    """How many paired repeats would decide a term, in words; past PRACTICAL_REPEATS the number
    means only that the estimate sits almost on the threshold (an A/A check's, always)."""
    if needed > PRACTICAL_REPEATS:
        return (
            f"more than {PRACTICAL_REPEATS} paired repeats would be needed: the estimate sits almost on the threshold"
        )
    return f"about {needed} paired repeats would decide it"


def decide(terms: list[Term]) -> tuple[str, str]:
    """(the verdict's word, the verdict with its reasons)."""
    if not terms:
        return "none", "no decision: no intended gain or tolerated regression was declared"
    intended = [term for term in terms if term.kind == "intended"]
    tolerated = [term for term in terms if term.kind == "tolerated"]
    failed = [term.criterion for term in intended if term.status == SHORT]
    failed += [term.criterion for term in tolerated if term.status == CROSSED]
    if failed:
        return "reject", f"reject: the 95% interval lies wholly on the wrong side of {', '.join(failed)}"
    open_intended = [term for term in intended if term.status != REACHED]
    open_tolerated = [term for term in tolerated if term.status == UNCERTAIN]
    if not open_intended:
        caveat = (
            f"; cannot yet rule out crossing {', '.join(_with_reason(term) for term in open_tolerated)}"
            if open_tolerated
            else ""
        )
        return "accept", (
            f"accept: every intended change reached (95% interval wholly past it), no tolerated bound crossed{caveat}"
        )
    needed = [term.repeats_needed() for term in open_intended]
    estimate = f"; {repeats_needed_text(max(needed))}" if needed and all(n is not None for n in needed) else ""
    return "inconclusive", (
        f"inconclusive: undecided: {', '.join(_with_reason(term) for term in open_intended)}{estimate}"
    )


def _with_reason(term: Term) -> str:
    """The criterion and why it is open: its note, else that its interval holds the threshold."""
    return f"{term.criterion} ({term.note or 'its 95% interval includes the threshold'})"
