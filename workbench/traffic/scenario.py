"""A scenario: an engine configuration, background traffic, a timeline of scripted events, the
SLOs declared before the run, and (for comparisons) named variants and a decision rule.
Presets (presets/*.toml) map one to one onto these dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.configuration.config import EngineConfig
from engine.errors import ConfigError
from engine.requests.metrics import RequestMetrics
from engine.settings import check_finite
from workbench.step_traces.log import check_trace_level
from workbench.traffic.profile import TrafficProfile

EVENT_ACTIONS = ("inject", "set_rate", "stop")


@dataclass
class ScenarioEvent:
    at_s: float
    action: str  # inject N requests | set_rate of the background traffic | stop issuing traffic
    count: int = 1
    prompt_tokens: int = 64
    output_tokens: int = 32
    tag: str = "injected"
    rate: float = 0.0  # set_rate: requests/s (0 pauses the background traffic)

    def __post_init__(self) -> None:
        if self.action not in EVENT_ACTIONS:
            raise ConfigError(f"action: expected one of {', '.join(EVENT_ACTIONS)}, got {self.action!r}")
        if self.at_s < 0 or self.count < 1 or self.prompt_tokens < 1 or self.output_tokens < 1 or self.rate < 0:
            raise ConfigError("expected at_s >= 0, count, prompt_tokens and output_tokens >= 1, rate >= 0")


@dataclass
class SLO:
    """Latency thresholds fixed before a run; a finished request meets the SLO when it meets each
    one that is set (TPOT is not checked for single-token outputs, where it is undefined)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def __post_init__(self) -> None:
        check_finite(self)
        for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name}: expected a positive number of milliseconds, got {value}")

    def met_by(self, metrics: RequestMetrics) -> bool:
        checks = ((self.ttft_ms, metrics.ttft_ms), (self.tpot_ms, metrics.tpot_ms), (self.e2e_ms, metrics.e2e_ms))
        return all(limit is None or value is None or value <= limit for limit, value in checks)


@dataclass
class Decision:
    """What a comparison of two variants intends to gain and what regression it tolerates, e.g.
    intended = ["chat/ttft_p99_ms:-50%"], tolerated = ["output_tok_s:-10%"]."""

    baseline: str
    candidate: str
    intended: list[str] = field(default_factory=list)
    tolerated: list[str] = field(default_factory=list)


@dataclass
class Variant:
    """Overrides of the scenario's own tables for one arm of a comparison."""

    description: str = ""
    engine: dict = field(default_factory=dict)
    traffic: dict = field(default_factory=dict)


@dataclass
class Scenario:
    name: str
    description: str = ""
    engine: EngineConfig = field(default_factory=EngineConfig)
    traffic: TrafficProfile | None = None  # None: only the scripted events send requests
    events: list[ScenarioEvent] = field(default_factory=list)
    slo: SLO = field(default_factory=SLO)
    seed: int = 0
    # Stop the run after this long even if requests are still in flight (0 = run to completion).
    max_duration_s: float = 0.0
    variants: dict[str, Variant] = field(default_factory=dict)
    decision: Decision | None = None
    # How much of each engine step's trace the run log keeps: "full", "summary" (decode rows
    # counted, not listed) or "auto" (full for the first steps, then summary; workbench/step_traces/log.py).
    trace: str = "auto"

    def __post_init__(self) -> None:
        check_trace_level(self.trace)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed: expected an integer >= 0, got {self.seed!r}")
        if not 0 <= self.max_duration_s < float("inf"):
            raise ConfigError(
                "max_duration_s: expected a finite number of seconds >= 0 (0 = run to completion), got "
                f"{self.max_duration_s!r}"
            )
        if self.traffic is None and not any(event.action == "inject" for event in self.events):
            raise ConfigError("traffic, events: a scenario needs background traffic or an inject event")
        if self.decision is not None:
            for role in ("baseline", "candidate"):
                name = getattr(self.decision, role)
                if name not in self.variants:
                    raise ConfigError(
                        f"decision.{role}: {name!r} is not a variant; variants are {', '.join(self.variants) or 'none'}"
                    )
