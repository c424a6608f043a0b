"""The Backend protocol: what serves requests, as the runner, the window and the reports see it.

Three kinds are planned: the in-process engine, real or simulated (workbench/backends/local.py), a
remote OpenAI-compatible server, and our own engine behind HTTP. The runner and the window use
only this protocol. The local backend drives the engine core (engine/core.py) in the thread that
calls `advance()`, as serve's core process drives it behind its sockets: one set of rules for
both. The simulated deployment, the quality measure and the published-figure replays step
engines of their own, outside any run.

A backend advances in `advance()`: the local one runs one engine step, a remote one collects what
its streams delivered since the last call. Each call returns a `BackendUpdate`: per-request
progress (new tokens, or finished with the request's metrics) and, where the backend can know
it, the server's state after the update. A remote server exposes only part of that state, so a
backend declares its `BackendCapabilities`; the window and the reports say "not exposed by this
backend" for what is missing instead of drawing zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from engine.execution.compile_cache import CompileProgress
from engine.loading.tokenizer import Tokenizer
from engine.requests.metrics import RequestMetrics, StepStats
from engine.requests.outputs import RequestOutput
from engine.requests.sampling_params import SamplingParams
from engine.requests.step_trace import StepTrace

Chat = tuple[dict[str, str], ...]  # chat messages: {"role": "user", "content": "..."}, in order

# Block-map cell values besides a request's row number.
BLOCK_FREE, BLOCK_CACHED, BLOCK_SHARED = -1, -2, -3


@dataclass(frozen=True)
class BackendCapabilities:
    kv_cache: bool = False  # KV usage % and capacity (tokens, blocks, block size)
    queues: bool = False  # waiting / waiting_long / running counts
    batch_composition: bool = False  # prefill and decode tokens of each step
    preemptions: bool = False
    prefix_cache: bool = False  # prefix-cache hits and queries
    block_map: bool = False  # which request holds which KV block
    token_ids: bool = False  # takes prompts as token ids (a chat endpoint may take only text)
    scheduled_events: bool = False  # when each request was scheduled and how many tokens each step computed
    step_trace: bool = False  # each step's causal record: what it saw, scheduled, allocated, freed, emitted

    def missing(self) -> list[str]:
        """What this backend does not expose, by field name."""
        return [name for name, present in vars(self).items() if not present]


IN_PROCESS = BackendCapabilities(**{name: True for name in BackendCapabilities.__dataclass_fields__})


@dataclass
class BackendUpdate:
    outputs: list[RequestOutput]  # per request that got tokens or ended since the last update
    stats: StepStats | None = None  # the server's state after the update, where exposed
    scheduled: dict[str, int] = field(default_factory=dict)  # tokens each request computed (scheduled_events)
    trace: StepTrace | None = None  # the step's causal record (step_trace)
    # A step that raised: what failed. `outputs` then holds the ends of the requests it failed
    # (finish reason "error"), and there are no stats or trace: no step completed.
    failure: str | None = None


@dataclass
class RequestProgress:
    """Where a request sent to the backend stands (for tables, and for requests a run ends without).
    Read on the engine thread's hot path, so nothing is copied: `metrics` may be the backend's
    live object; copy it to keep it."""

    state: str  # waiting, running, ... in the engine's words
    metrics: RequestMetrics  # so far
    num_prompt_tokens: int
    num_tokens: int  # prompt and output tokens so far


class Backend(Protocol):
    name: str  # what serves the requests, for the run log ("in-process engine", a server's URL)
    capabilities: BackendCapabilities
    max_model_len: int  # longest prompt + output a request may have
    vocab_size: int
    tokenizer: Tokenizer | None  # None: prompts are token ids only
    kv_capacity_tokens: int | None  # None where not exposed
    kv_cache_bytes: int | None
    num_kv_blocks: int | None
    clock: Callable[[], float]  # seconds; a simulated backend's own clock
    sleep: Callable[[float], None]  # how to wait on that clock
    # Waiting on that clock costs no wall time (a simulated clock at full speed): the runner jumps
    # to the next arrival instead of waiting in short polls.
    idle_wait_is_free: bool

    def describe(self) -> dict:
        """Provenance for the run log: {"versions": ..., "engine": ...}."""

    def submit(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str,
        arrival_time: float,
        priority: int = 0,
        messages: Chat | None = None,
    ) -> str:
        """Queue a request; raises EngineError for what can never run (never later, mid-step).
        `messages`: the chat that `prompt` was templated from. A server gets the chat (and applies
        its own template); the in-process engine runs the templated prompt."""

    def abort(self, request_id: str) -> None:
        """End a request; it comes back finished with reason "abort" in the next update."""

    def has_unfinished(self) -> bool:
        """Some request sent has not ended yet."""

    def advance(self, until: float | None = None) -> BackendUpdate:
        """Make progress and report it (the local backend: one engine step). `until`: when the
        next planned request arrives, on this clock; a backend that simulates several instances
        (workbench/backends/deployment.py) runs no event after it, the others need not look."""

    def progress(self, request_id: str) -> RequestProgress | None:
        """None once the request has ended (or was never queued)."""

    def warm_up_progress(self) -> CompileProgress | None:
        """What the backend still does before it serves at full speed (the in-process engine's
        decode-graph compile), or None once it does."""

    def stop_background_work(self) -> None:
        """Stop what runs beside the requests (the in-process engine's decode-graph compile) and
        must not run while the next backend is built; the backend still serves."""

    def close(self) -> None:
        """Release what the backend holds (a compile, connections, threads); it is not used again."""

    def problems(self) -> list[str]:
        """What went wrong outside any one request during the run (a server-state scraper that
        stopped or failed); the run's report lists them and a run with any is incomplete."""

    def block_owners(self, rows: dict[str, int]) -> np.ndarray | None:
        """Per KV block: the row number of the request holding it (`rows`: request id -> row),
        BLOCK_SHARED, BLOCK_CACHED or BLOCK_FREE; None without the block_map capability."""

    def window_blocks(self) -> np.ndarray | None:
        """Per KV block: whether a sliding-window group of layers holds (or last held) it
        (engine/model_spec/kv_layout.py); None without the block_map capability."""
