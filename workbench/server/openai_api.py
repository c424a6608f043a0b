"""The OpenAI-compatible HTTP API over the engine core (FastAPI, as vLLM's server):

  GET  /v1/models, /health (503 while warming up), /version, /metrics (Prometheus, vLLM's names)
  POST /v1/completions, /v1/chat/completions: prompt text or token ids, max_tokens, temperature,
       top_p, top_k, min_p, seed, stop, ignore_eos; `stream` (server-sent events, with
       `stream_options.include_usage`); `return_token_ids` adds each choice's token ids, as vLLM

As vLLM: every error, 404 and 405 included, comes in OpenAI's error shape; an invalid request
(a value out of range, text that is not valid Unicode, prompt + max_tokens beyond the context)
gets 400 and an unknown `model` 404; a client that disconnects, streaming or not, aborts its
request, which frees its KV blocks at the next step. Unlike vLLM, `logprobs`, `top_logprobs`,
`echo` and `n` > 1 are refused (400) rather than served. A body larger than `max_request_bytes`
is refused (413) before it is parsed, and text is tokenized off the event loop, so one huge
prompt cannot stall /health or other streams.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from starlette.exceptions import HTTPException

from engine import EngineError, SamplingParams
from engine.loading.tokenizer import Tokenizer
from engine.requests.outputs import RequestOutput
from workbench.machine.provenance import package_version
from workbench.server import DEFAULT_MAX_REQUEST_BYTES
from workbench.server.body_limit import BodyLimit
from workbench.server.core_protocol import EndReason
from workbench.server.engine_client import EngineCoreClient, EngineFailure

# An integer the engine core's messages can carry (msgpack: -2**63 to 2**64 - 1). A larger one (a seed of
# 2**64, a token id of 10**20) would fail to encode after the request was registered (a 500, a
# reset connection, a request left behind): the API refuses it first, a 400 naming the field.
MessageInt = Annotated[int, Field(ge=-(2**63), le=2**64 - 1)]


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")  # as vLLM: fields it does not know are ignored

    model: str | None = None
    max_tokens: MessageInt | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: MessageInt = 0  # vLLM's -1 means off too
    min_p: float = 0.0
    seed: MessageInt | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    n: MessageInt = 1
    stream: bool = False
    stream_options: dict | None = None
    return_token_ids: bool = False
    # Not served: refused when asked for, rather than silently ignored.
    logprobs: bool | MessageInt | None = None
    top_logprobs: MessageInt | None = None
    echo: bool = False

    def sampling_params(self, default_max_tokens: int) -> SamplingParams:
        if self.n != 1:
            raise EngineError(f"n: only 1 choice per request is served, got {self.n}")
        for name in ("logprobs", "top_logprobs", "echo"):
            if getattr(self, name) not in (None, False):
                raise EngineError(f"{name}: not supported by workbench serve, got {getattr(self, name)!r}")
        if self.top_k < -1:
            raise EngineError(f"top_k: expected -1 or 0 (off) or a positive integer, got {self.top_k}")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        for text in stop:
            check_unicode("stop", text)
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            min_p=self.min_p,
            seed=self.seed,
            max_tokens=self.max_tokens if self.max_tokens is not None else default_max_tokens,
            stop=stop,
            ignore_eos=self.ignore_eos,
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class CompletionRequest(_Sampling):
    # Strict: a lax int took `[1, true]` for `[1, 1]` (a token id is an integer, not a boolean).
    prompt: str | list[StrictInt] = Field(min_length=1)


class ChatMessage(BaseModel):
    role: str
    content: str


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: MessageInt | None = None


class BadRequest(Exception):
    """Answered with `status` in OpenAI's error shape."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# The core's typed reasons as HTTP: only this layer knows HTTP.
HTTP_STATUS = {
    EndReason.REFUSED: 400,
    EndReason.SHUTTING_DOWN: 503,
    EndReason.UNAVAILABLE: 503,
    EndReason.FAILED: 500,
}

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "RequestTooLargeError",
    503: "ServiceUnavailableError",
}


def error_body(message: str, status: int) -> dict:
    """OpenAI's error shape, as a response's body or a stream's last event."""
    kind = _ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def error_response(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse(error_body(message, status), status_code=status)


def check_unicode(name: str, text: str) -> None:
    """JSON can carry a lone surrogate ("\\ud800"), which no tokenizer can encode: a 400, not a 500."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise BadRequest(
            f"{name}: not valid Unicode: a lone surrogate {text[error.start]!r} at character {error.start}"
        ) from None


def create_app(core: EngineCoreClient, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> FastAPI:
    app = FastAPI(title="workbench serve")
    tokenizer = core.tokenizer
    created = int(time.time())

    app.add_middleware(BodyLimit, max_bytes=max_request_bytes, error_body=lambda message: error_body(message, 413))

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc'][1:]) or 'body'}: {item['msg']}" for item in error.errors()
        )
        return error_response(f"invalid request: {problems}")

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, error: BadRequest) -> JSONResponse:
        return error_response(str(error), error.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return error_response(str(error.detail), error.status_code)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> JSONResponse:
        return error_response(f"internal error: {type(error).__name__}: {error}", 500)

    @app.get("/health")
    async def health() -> Response:
        if core.failure is not None:
            return error_response(f"the engine has stopped serving: {core.failure}", 503)
        if core.shutting_down:
            return error_response("the server is shutting down", 503)
        if (progress := core.warming_up()) is not None:
            return error_response(f"warming up: {progress}; requests wait until it ends", 503)
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict:
        return {"version": package_version("workbench")}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(core.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": core.model_name,
                    "object": "model",
                    "created": created,
                    "owned_by": "workbench",
                    "max_model_len": core.max_model_len,
                }
            ],
        }

    def check_model(body: _Sampling) -> None:
        if body.model is not None and body.model != core.model_name:
            raise BadRequest(f"The model `{body.model}` does not exist.", 404)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        check_model(body)
        if isinstance(body.prompt, str):
            check_unicode("prompt", body.prompt)
            prompt_ids = await _encode(tokenizer, body.prompt)
        else:
            prompt_ids = list(body.prompt)
            for index, token in enumerate(prompt_ids):
                if not -(2**63) <= token <= 2**64 - 1:  # the engine's own check names the vocabulary
                    raise BadRequest(f"prompt[{index}]: expected a token id of at most 64 bits, got {token}")
        return await _serve(core, request, body, prompt_ids, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        check_model(body)
        if tokenizer is None or not tokenizer.chat_template:
            raise BadRequest(f"model {core.model_name!r} has no chat template: use /v1/completions")
        for index, message in enumerate(body.messages):
            check_unicode(f"messages[{index}].role", message.role)
            check_unicode(f"messages[{index}].content", message.content)
        if body.max_completion_tokens is not None and body.max_tokens is None:
            body.max_tokens = body.max_completion_tokens
        messages = [message.model_dump() for message in body.messages]
        text = await asyncio.to_thread(tokenizer.apply_chat_template, messages)
        return await _serve(core, request, body, await _encode(tokenizer, text), chat=True)

    return app


async def _encode(tokenizer: Tokenizer | None, text: str) -> list[int]:
    """Token ids, computed in a worker thread: a long text takes seconds, which the event loop
    (every other stream, /health, /metrics) must not wait for."""
    if tokenizer is None:
        raise BadRequest("this model has no tokenizer (a simulated model): send the prompt as token ids")
    return await asyncio.to_thread(tokenizer.encode, text)


def _check_context(max_model_len: int, prompt_tokens: int, max_tokens: int | None) -> None:
    """As vLLM: a request whose prompt and max_tokens do not fit the context is refused, not cut."""
    if max_tokens is not None and prompt_tokens + max_tokens > max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} in the "
            f"completion). Please reduce the length of the prompt or completion."
        )


async def _serve(core: EngineCoreClient, request: Request, body: _Sampling, prompt_ids: list[int], *, chat: bool):
    """Submit, wait for the first event (a refusal or a rejection answers 400), then stream or
    collect; a client that disconnects before its answer is complete aborts the request."""
    if core.failure is not None:
        raise BadRequest(f"the engine has stopped serving: {core.failure}", 503)
    try:
        if len(prompt_ids) <= core.max_model_len:  # longer prompts get the engine's own rejection below
            _check_context(core.max_model_len, len(prompt_ids), body.max_tokens)
        params = body.sampling_params(default_max_tokens=max(1, core.max_model_len - len(prompt_ids)))
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        outputs = core.submit(request_id, prompt_ids, params)
    except EngineError as error:  # the sampling parameters, checked before anything is sent
        raise BadRequest(str(error)) from error
    except EngineFailure as error:  # submitted after the shutdown began, or the engine stopped
        raise BadRequest(str(error), HTTP_STATUS[error.reason]) from error
    first = await _until_disconnected(request, outputs.get())
    if first is None:
        core.abort(request_id)
        return Response(status_code=499)  # nobody reads it: the client has gone
    _raise_if_failed(first)
    if first.finish_reason == "rejected":
        raise BadRequest(first.metrics.finish_detail or "the request can never run on this server")
    response = _Response(request_id, core.model_name, len(prompt_ids), chat, body.return_token_ids)
    if not body.stream:
        last = await _until_disconnected(request, _last_output(first, outputs))
        if last is None:
            core.abort(request_id)
            return Response(status_code=499)
        _raise_if_failed(last)
        return response.whole(last)
    return StreamingResponse(
        _stream(core, response, first, outputs, body.include_usage), media_type="text/event-stream"
    )


async def _last_output(first: RequestOutput, outputs: asyncio.Queue) -> RequestOutput | EngineFailure:
    output = first
    while isinstance(output, RequestOutput) and not output.finished:
        output = await outputs.get()
    return output


async def _until_disconnected(request: Request, waiting):
    """The awaited result, or None if the client disconnects first (as vLLM's `with_cancellation`:
    the body has been read, so the next ASGI message can only be the disconnect)."""
    task = asyncio.ensure_future(waiting)
    disconnect = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, disconnect), return_when=asyncio.FIRST_COMPLETED)
    finally:
        disconnect.cancel()
    if task.done():
        return task.result()
    task.cancel()
    return None


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _raise_if_failed(output) -> None:
    if isinstance(output, EngineFailure):
        raise BadRequest(str(output), HTTP_STATUS[output.reason])


async def _stream(
    core: EngineCoreClient, response: _Response, first: RequestOutput, outputs, include_usage: bool
) -> AsyncIterator[str]:
    output = first
    try:
        while True:
            yield _event(response.chunk(output))
            if output.finished:
                break
            output = await outputs.get()
            if isinstance(output, EngineFailure):
                yield _event(error_body(str(output), HTTP_STATUS[output.reason]))
                return
        if include_usage:
            yield _event(response.usage_chunk(output))
        yield "data: [DONE]\n\n"
    finally:
        if not isinstance(output, EngineFailure) and not output.finished:  # the client went away: free the blocks
            core.abort(response.request_id)


def _event(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


class _Response:
    """The OpenAI shapes of one request's answer: whole, or chunk by chunk with text deltas."""

    def __init__(
        self,
        request_id: str,
        model: str,
        prompt_tokens: int,
        chat: bool,
        return_token_ids: bool,
    ):
        self.request_id, self.model, self.prompt_tokens = request_id, model, prompt_tokens
        self.chat, self.return_token_ids = chat, return_token_ids
        self.created = int(time.time())

    def _head(self, streaming: bool) -> dict:
        kind = ("chat.completion" if self.chat else "text_completion") + (".chunk" if streaming and self.chat else "")
        return {"id": self.request_id, "object": kind, "created": self.created, "model": self.model}

    def _usage(self, output: RequestOutput) -> dict:
        completion = len(output.token_ids)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }

    def _choice(self, text: str, token_ids: list[int], finish_reason: str | None, streaming: bool) -> dict:
        if self.chat:
            content = {"role": "assistant", "content": text}
            choice = {"index": 0, "delta" if streaming else "message": content, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish_reason}
        if self.return_token_ids:
            choice["token_ids"] = token_ids
        return choice

    def whole(self, output: RequestOutput) -> dict:
        choice = self._choice(output.text or "", output.token_ids, output.finish_reason, streaming=False)
        return {**self._head(streaming=False), "choices": [choice], "usage": self._usage(output)}

    def chunk(self, output: RequestOutput) -> dict:
        reason = output.finish_reason if output.finished else None
        # The engine decodes a token at a time and holds back what may begin a stop string.
        choice = self._choice(output.new_text, output.new_token_ids, reason, streaming=True)
        return {**self._head(streaming=True), "choices": [choice]}

    def usage_chunk(self, output: RequestOutput) -> dict:
        return {**self._head(streaming=True), "choices": [], "usage": self._usage(output)}
