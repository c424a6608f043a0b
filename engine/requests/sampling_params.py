"""`SamplingParams`: how one request turns logits into tokens, and when it stops.

Every field is checked here, when the request is made: a value the sampler could not use must
never reach a step (where it would fail the step, or quietly sample garbage)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from engine.errors import ConfigError

# Below this temperature, sampling is greedy (as in vLLM): dividing logits by a tiny temperature
# overflows float32 and turns every probability into NaN.
GREEDY_TEMPERATURE = 1e-5
# Every stop string is looked for after every token, in the loop that steps all requests
# (engine/requests/detokenizer.py): their number and length bound what one request can cost the others.
# vLLM bounds the number too (VLLM_MAX_STOP_STRINGS); OpenAI's API takes 4.
MAX_STOP_STRINGS = 64
MAX_STOP_STRING_CHARS = 256


@dataclass
class SamplingParams:
    # 0 means greedy (argmax); otherwise logits are divided by it before sampling.
    temperature: float = 1.0
    # Keep only the k most likely tokens (0 = no limit).
    top_k: int = 0
    # Keep the smallest set of tokens whose probability adds up to top_p (1.0 = no limit).
    top_p: float = 1.0
    # Drop tokens less likely than min_p times the most likely one (0.0 = no limit).
    min_p: float = 0.0
    # Same seed, same prompt, same tokens, whatever else is in the batch. None: the engine's seed
    # stream, so results still repeat for a whole run with the same engine seed.
    seed: int | None = None
    max_tokens: int = 16
    stop_token_ids: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    # Keep generating past end-of-sequence (benchmarks want fixed output lengths).
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        self.temperature = _real(
            "temperature", self.temperature, "a finite number >= 0 (0 = greedy)", lambda value: value >= 0
        )
        self.top_p = _real("top_p", self.top_p, "a number in (0, 1]", lambda value: 0.0 < value <= 1.0)
        self.min_p = _real("min_p", self.min_p, "a number in [0, 1]", lambda value: 0.0 <= value <= 1.0)
        self.top_k = _integer("top_k", self.top_k, "an integer >= 0 (0 = off)", lambda value: value >= 0)
        self.max_tokens = _integer("max_tokens", self.max_tokens, "a positive integer", lambda value: value >= 1)
        if self.seed is not None:
            self.seed = _integer("seed", self.seed, "an integer or None", lambda value: True)
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not isinstance(self.stop, (list, tuple)) or not all(isinstance(text, str) and text for text in self.stop):
            raise ConfigError(f"stop: expected a list of non-empty strings, got {self.stop!r}")
        self.stop = list(self.stop)
        if len(self.stop) > MAX_STOP_STRINGS:
            raise ConfigError(f"stop: at most {MAX_STOP_STRINGS} stop strings, got {len(self.stop)}")
        if too_long := [text for text in self.stop if len(text) > MAX_STOP_STRING_CHARS]:
            raise ConfigError(
                f"stop: each stop string at most {MAX_STOP_STRING_CHARS} characters, got one of {len(too_long[0])}"
            )
        if not isinstance(self.stop_token_ids, (list, tuple)):
            raise ConfigError(f"stop_token_ids: expected a list of token ids, got {self.stop_token_ids!r}")
        self.stop_token_ids = [
            _integer("stop_token_ids", token, "token ids >= 0", lambda value: value >= 0)
            for token in self.stop_token_ids
        ]
        if not isinstance(self.ignore_eos, bool):
            raise ConfigError(f"ignore_eos: expected true or false, got {self.ignore_eos!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE


def _real(name: str, value: object, expected: str, valid) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not valid(value):
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    return float(value)


def _integer(name: str, value: object, expected: str, valid) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not valid(value):
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    return int(value)
