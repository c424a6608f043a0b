"""The serving software's own costs, as named profiles (presets/catalogue/stacks.toml): what a
simulated GPU adds to its roofline for the engine that drives it, so that "an 8B on an H100"
reads as vLLM V1 or SGLang reads on one, not as the hardware alone could.

A stack is physical parts, each a number with the source that gives it or bounds it (`Part`):

- `schedule_s`, `schedule_per_sequence_s`: the CPU's time for one scheduler call (choosing the
  batch, preparing its inputs), fixed and per sequence. Multi-step scheduling (vLLM 0.6's
  `--num-scheduler-steps` N, the engine's `num_scheduler_steps`) makes one call for a run of N
  decode steps; a step that prefills is a call of its own (engine/scheduling/scheduler.py).
- `launch_graph_s`: launching a step captured as a CUDA graph (one replay);
  `launch_eager_per_layer_s`: launching a layer's kernels one by one, for steps larger than the
  largest captured (`graph_max_tokens`), and for steps that prefill unless the stack captures
  those too (`graph_mixed_steps`: vLLM V1's piecewise graphs). Launches are asynchronous: the
  device's part of a step is the longer of the GPU's time and the launches'.
- `output_s`, `output_per_sequence_s`: output processing per step, fixed and per sequence
  (gathering the sampled tokens, stop checks, detokenizing, streaming: an event loop's turn
  and each stream's chunk).
- `request_s`: the API server's cost per request (parsing, tokenizing, handing it to the engine
  and its first token back), on that request's path to its first token. The simulator charges it
  to the step that starts the request, serially: exact where the server shares the engine's
  process (vLLM 0.5), and where it has its own it over-counts the other rows' time in that step
  by at most request_s x the arrival rate (1-2% of a step's time at 4-8 requests/s) instead of
  delaying only the one request.

and what the stack overlaps with the GPU: output processing (`output_overlapped`: vLLM 0.6's
asynchronous output processing, V1's separate processes) and scheduling (`schedule_overlapped`:
SGLang 0.4's and TensorRT-LLM's overlap schedulers run one batch ahead). A step takes

    serial host time + max(device time, overlapped host time)
    device time = max(GPU time, launch time)

Parts no source gives are fitted to the published runs of presets/published/corpus.toml inside
the bounds a source sets (`workbench calibrate --published --refit`; docs/memory.md)."""

from __future__ import annotations

import dataclasses
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
DEFAULT_STACK = "vllm-0.8"


@dataclass(frozen=True)
class Part:
    """One cost in seconds, where it comes from, and the (low, high) a source allows it. A part
    no source gives exactly is `fitted` to published runs, never outside its bounds."""

    value: float
    source: str
    bounds: tuple[float, ...] = ()
    fitted: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.value, (int, float)) or self.value < 0:
            raise ConfigError(f"value: expected seconds >= 0, got {self.value!r}")
        if len(self.bounds) != 2 or not 0 <= self.bounds[0] <= self.bounds[1]:
            raise ConfigError(f"bounds: expected [low, high] with 0 <= low <= high, got {list(self.bounds)!r}")
        if not self.bounds[0] <= self.value <= self.bounds[1]:
            raise ConfigError(
                f"value {self.value!r} is outside its source's bounds {list(self.bounds)!r} ({self.source})"
            )
        if not self.source.strip():
            raise ConfigError("source: expected where the value or its bounds come from")


NONE = Part(0.0, "not a cost of this stack", (0.0, 0.0))
PART_NAMES = (
    "schedule_s",
    "schedule_per_sequence_s",
    "output_s",
    "output_per_sequence_s",
    "request_s",
    "launch_graph_s",
    "launch_eager_per_layer_s",
)


@dataclass(frozen=True)
class ServingStack:
    source: str
    schedule_s: Part = NONE
    schedule_per_sequence_s: Part = NONE
    output_s: Part = NONE
    output_per_sequence_s: Part = NONE
    request_s: Part = NONE
    launch_graph_s: Part = NONE
    launch_eager_per_layer_s: Part = NONE
    graph_max_tokens: int = 0  # the largest step captured as a CUDA graph, in tokens; 0: none
    graph_mixed_steps: bool = False  # graphs also for steps that prefill (piecewise capture)
    output_overlapped: bool = False
    schedule_overlapped: bool = False

    def __post_init__(self) -> None:
        if self.graph_max_tokens < 0:
            raise ConfigError(f"graph_max_tokens: expected tokens >= 0, got {self.graph_max_tokens!r}")

    def parts(self) -> dict[str, Part]:
        return {name: getattr(self, name) for name in PART_NAMES}

    def with_values(self, **values: float) -> ServingStack:
        """The stack with these parts' values changed (a fit trying them)."""
        return dataclasses.replace(
            self, **{name: dataclasses.replace(getattr(self, name), value=value) for name, value in values.items()}
        )

    def launch_s(self, tokens: int, has_prefill: bool, layers: int) -> float:
        graphed = 0 < tokens <= self.graph_max_tokens and (self.graph_mixed_steps or not has_prefill)
        return self.launch_graph_s.value if graphed else self.launch_eager_per_layer_s.value * layers

    def step_s(
        self,
        gpu_s: float,
        sequences: int,
        new_requests: int,
        *,
        tokens: int,
        has_prefill: bool,
        layers: int,
        scheduler_steps: int = 1,
    ) -> float:
        """One step's time: `sequences` rows computing `tokens` tokens on `layers` layers (one
        GPU's stage), `new_requests` of them starting, under multi-step scheduling of
        `scheduler_steps` (a decode step pays 1/N of the call it shares)."""
        calls = 1.0 if has_prefill else 1.0 / scheduler_steps
        schedule = calls * (self.schedule_s.value + self.schedule_per_sequence_s.value * sequences)
        output = self.output_s.value + self.output_per_sequence_s.value * sequences
        serial, hidden = self.request_s.value * new_requests, 0.0
        for cost, overlapped in ((schedule, self.schedule_overlapped), (output, self.output_overlapped)):
            if overlapped:
                hidden += cost
            else:
                serial += cost
        device = max(gpu_s, self.launch_s(tokens, has_prefill, layers))
        return serial + max(device, hidden)


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
