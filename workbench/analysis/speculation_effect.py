"""What speculative decoding did for a run's requests, from their metrics (docs/speculation.md).

Each accepted proposal is a decode step the request did not take. What that step would have cost
is estimated at the request's own decode steps' mean time (first token to last, over the steps it
took): an upper bound on the time saved, since those steps carried its proposal rows and a plain
step is shorter. The measure of the net effect is the same traffic with speculation off
(`workbench compare`, the speculation-vs-batch preset); this says where the gain went.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.requests.metrics import FINISHED_REASONS


@dataclass(frozen=True)
class RequestSpeculation:
    request_id: str
    proposed: int
    accepted: int
    saved_s: float  # accepted x the mean time of the decode steps it took (an upper bound)


@dataclass(frozen=True)
class SpeculationSummary:
    requests: list[RequestSpeculation]  # the finished requests that speculated

    @property
    def proposed(self) -> int:
        return sum(request.proposed for request in self.requests)

    @property
    def accepted(self) -> int:
        return sum(request.accepted for request in self.requests)

    def text(self) -> str:
        n = len(self.requests)
        saved = sum(request.saved_s for request in self.requests)
        return (
            f"Speculation: {n} finished requests proposed {self.proposed:,} tokens and the model accepted "
            f"{self.accepted:,} ({100.0 * self.accepted / self.proposed:.1f}%): {self.accepted:,} decode steps fewer, "
            f"at most {1000.0 * saved / n:,.0f} ms a request (mean, n = {n}) at their own steps' time; those steps "
            "also computed the rejected proposals, so a run with speculation off measures the net effect."
        )


def request_speculation(record: dict) -> RequestSpeculation | None:
    """A finished request's speculation, from its run-log record (None: it never speculated)."""
    proposed, accepted = record.get("proposed_tokens", 0), record.get("accepted_tokens", 0)
    times = record["token_times"]
    if not proposed or record["finish_reason"] not in FINISHED_REASONS or len(times) < 2:
        return None
    steps_taken = len(times) - 1 - accepted  # decode steps after the first token
    step_s = (times[-1] - times[0]) / steps_taken if steps_taken > 0 else 0.0
    return RequestSpeculation(record["request_id"], proposed, accepted, accepted * step_s)


def summarise_speculation(records: list[dict]) -> SpeculationSummary | None:
    requests = [speculation for record in records if (speculation := request_speculation(record)) is not None]
    return SpeculationSummary(requests) if requests else None
