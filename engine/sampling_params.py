"""`SamplingParams`: how one request turns logits into tokens, and when it stops."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.errors import ConfigError


@dataclass
class SamplingParams:
    # 0 means greedy (argmax); otherwise logits are divided by it before sampling.
    temperature: float = 1.0
    # Keep only the k most likely tokens (0 = no limit).
    top_k: int = 0
    # Keep the smallest set of tokens whose probability adds up to top_p (1.0 = no limit).
    top_p: float = 1.0
    # Same seed, same prompt, same tokens, whatever else is in the batch. None: the engine's seed
    # stream, so results still repeat for a whole run with the same engine seed.
    seed: int | None = None
    max_tokens: int = 16
    stop_token_ids: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    # Keep generating past end-of-sequence (benchmarks want fixed output lengths).
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"temperature: expected >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"top_k: expected >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p: expected a value in (0, 1], got {self.top_p}")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ConfigError(f"max_tokens: expected a positive integer, got {self.max_tokens!r}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
