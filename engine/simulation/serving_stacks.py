"""The serving software's own costs, as named profiles (presets/catalogue/stacks.toml): what a
simulated GPU adds to its roofline for the engine that drives it, so that "an 8B on an H100"
reads as vLLM 0.6 or SGLang 0.3 reads on one, not as the hardware alone could.

A step of a simulated engine takes (engine/simulation/cost_model.py)

    GPU time + host time - the part of the host time the stack overlaps with the GPU
    host time = step_overhead_s / N + sequence_overhead_s x sequences
                + request_overhead_s x requests starting their prefill in the step

- `step_overhead_s`: scheduling, input preparation and launches once per scheduler call;
  multi-step scheduling (the engine's `num_scheduler_steps` N, vLLM 0.6's
  `--num-scheduler-steps`) pays it once every N steps.
- `sequence_overhead_s`: per sequence in the step: its metadata, sampling bookkeeping, output
  processing and detokenizing.
- `request_overhead_s`: per request, once: the API server's parsing, tokenizing, admission.
- `host_overlap`: the fraction of the host time hidden behind the GPU's (asynchronous output
  processing, overlap scheduling), never more than the GPU time itself.

Each profile names its source and the published runs it was fitted to (`workbench calibrate
--published` refits them and reports the held-out error: docs/memory.md)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

from engine.errors import ConfigError
from engine.settings import build
from engine.simulation.catalogue import CATALOGUE_DIR

STACKS_FILE = CATALOGUE_DIR / "stacks.toml"
# "auto": a catalogued GPU runs under DEFAULT_STACK; a profile measured on this machine under
# IDEAL, since the host time it was measured with is in its own step overhead already.
AUTO = "auto"
IDEAL = "ideal"
DEFAULT_STACK = "vllm-0.6.0"


@dataclass(frozen=True)
class ServingStack:
    source: str
    step_overhead_s: float = 0.0
    sequence_overhead_s: float = 0.0
    request_overhead_s: float = 0.0
    host_overlap: float = 0.0

    def __post_init__(self) -> None:
        for name in ("step_overhead_s", "sequence_overhead_s", "request_overhead_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{name}: expected seconds >= 0, got {value!r}")
        if not 0.0 <= self.host_overlap <= 1.0:
            raise ConfigError(f"host_overlap: expected a fraction in [0, 1], got {self.host_overlap!r}")

    def host_s(self, sequences: int, new_requests: int, scheduler_steps: int = 1) -> float:
        """The host's time for one step of `sequences`, `new_requests` of them starting, under
        multi-step scheduling of `scheduler_steps`."""
        return (
            self.step_overhead_s / scheduler_steps
            + self.sequence_overhead_s * sequences
            + self.request_overhead_s * new_requests
        )

    def step_s(self, gpu_s: float, sequences: int, new_requests: int, scheduler_steps: int = 1) -> float:
        host = self.host_s(sequences, new_requests, scheduler_steps)
        return gpu_s + host - min(self.host_overlap * host, gpu_s)


def _table() -> dict:
    try:
        return tomllib.loads(STACKS_FILE.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{STACKS_FILE}: not valid TOML ({exc})") from exc


def stack_names() -> list[str]:
    return sorted(_table())


def serving_stack(name: str) -> ServingStack:
    table = _table()
    if name not in table:
        raise ConfigError(f"serving_stack: unknown stack {name!r}; known: {', '.join([AUTO, *sorted(table)])}")
    return build(ServingStack, table[name], str(STACKS_FILE), name)
