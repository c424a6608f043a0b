"""The messages between `workbench serve`'s HTTP process and its engine core, and how they travel.

The HTTP process sends commands (add a request, abort one, end all, stop); the core answers
with events (it is ready, a request was added or refused, a step's outputs and statistics, a
failed step, its warm-up, why it stopped serving). Each message is a msgspec struct tagged with
its kind, sent as MessagePack over a pair of ZeroMQ PUSH/PULL sockets, as vLLM's EngineCore
client does:

- **Pickle-free.** MessagePack carries numbers, strings and lists; a decoder given the tagged
  union builds only these types and refuses anything else, so nothing that arrives can run code.
- **Fast.** msgspec encodes a step of 256 outputs in tens of microseconds, and decoding into the
  declared types checks them in the same pass. ZeroMQ frames each message, queues it while the
  other side is busy, and goes over a Unix socket (`ipc://`) between processes or in memory
  (`inproc://`) when the core is a thread of the same process (the tests' planted failures).

A step's message carries each request's new tokens and text only; the client keeps the whole
output, so a 32k-token answer is not sent again on every step. The request's metrics and whole
text come once, with its end.
"""

from __future__ import annotations

import enum

import msgspec

from engine.requests.metrics import RequestMetrics, StepStats
from engine.requests.sampling_params import SamplingParams

# ----- commands: HTTP process -> core -----------------------------------------------------------


class AddRequest(msgspec.Struct, tag="add"):
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams


class AbortRequest(msgspec.Struct, tag="abort"):
    request_id: str


class EndAllRequests(msgspec.Struct, tag="end all"):
    """The server is shutting down: end every request, and refuse later ones."""


class StopCore(msgspec.Struct, tag="stop"):
    """Leave the loop, close the engine (its background compile too) and exit."""


Command = AddRequest | AbortRequest | EndAllRequests | StopCore

# ----- events: core -> HTTP process -------------------------------------------------------------


class CoreReady(msgspec.Struct, tag="ready"):
    """The engine is loaded: what the HTTP side needs to check requests and label its metrics."""

    max_model_len: int
    block_size: int
    num_kv_blocks: int
    warming_up: str | None  # the compile's progress, or None when decode runs compiled already


class CoreStartFailed(msgspec.Struct, tag="start failed"):
    """The engine could not be built (a bad model path, too little memory): the reason, one line."""

    message: str


class EndReason(enum.Enum):
    """Why a request ended without output, or was not taken: the core says what happened, and
    the HTTP layer alone (workbench/server/openai_api.py, HTTP_STATUS) says what status that is."""

    REFUSED = "refused"  # add_request refused what the request asked (it can never run here)
    SHUTTING_DOWN = "shutting down"  # the server is stopping: queued and new requests end
    UNAVAILABLE = "unavailable"  # the engine stopped serving: new requests are not taken
    FAILED = "failed"  # the step the request was in raised, or the core died under it


class OutputDelta(msgspec.Struct, array_like=True):
    """What one step produced for one request; `text` and `metrics` come only with its end."""

    request_id: str
    new_token_ids: list[int]
    new_text: str
    finished: bool
    finish_reason: str | None = None
    text: str | None = None
    metrics: RequestMetrics | None = None


class StepDone(msgspec.Struct, tag="step"):
    """A step's outputs and statistics; `idle_kv_blocks_used` is set when nothing is left to run."""

    outputs: list[OutputDelta]
    stats: StepStats
    generated_tokens: int
    idle_kv_blocks_used: int | None = None


class StepFailed(msgspec.Struct, tag="step failed"):
    """A step raised: its requests were aborted and end with this message."""

    request_ids: list[str]
    message: str
    kv_blocks_used: int


class RequestsEnded(msgspec.Struct, tag="ended"):
    """Requests ended without output, each with this message and reason: a request add_request
    refused (REFUSED; an AddRequest gets no other answer, so a submit never waits for the core),
    or every open request when the server shuts down."""

    request_ids: list[str]
    message: str
    reason: EndReason


class WarmUp(msgspec.Struct, tag="warm up"):
    """The compile's progress (None once decode runs compiled), and the requests it holds."""

    progress: str | None
    num_waiting: int


class CoreStopped(msgspec.Struct, tag="stopped"):
    """The core stopped serving: `failure` says why (None for a requested stop)."""

    failure: str | None


Event = CoreReady | CoreStartFailed | StepDone | StepFailed | RequestsEnded | WarmUp | CoreStopped

encode = msgspec.msgpack.Encoder().encode
decode_command = msgspec.msgpack.Decoder(Command).decode
decode_event = msgspec.msgpack.Decoder(Event).decode
