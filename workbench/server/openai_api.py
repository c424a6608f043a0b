"""The OpenAI-compatible HTTP API over an `EngineLoop` (FastAPI, as vLLM's server):

  GET  /v1/models, /health, /version, /metrics (Prometheus, vLLM's names)
  POST /v1/completions, /v1/chat/completions: prompt text or token ids, max_tokens, temperature,
       top_p, top_k, seed, stop, ignore_eos; `stream` (server-sent events, with
       `stream_options.include_usage`); `return_token_ids` adds each choice's token ids, as vLLM

Invalid requests get 400 with an OpenAI-style error body. A streaming client that disconnects
aborts its request, which frees its KV blocks at the next step.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from engine import EngineError, SamplingParams
from engine.outputs import RequestOutput
from engine.tokenizer import Tokenizer
from workbench.provenance import package_version
from workbench.server.engine_loop import EngineLoop


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")  # as vLLM: fields it does not know are ignored

    model: str | None = None
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # vLLM's -1 means off too
    seed: int | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    n: int = 1
    stream: bool = False
    stream_options: dict | None = None
    return_token_ids: bool = False

    def sampling_params(self, default_max_tokens: int) -> SamplingParams:
        if self.n != 1:
            raise EngineError(f"n: only 1 choice per request is served, got {self.n}")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            temperature=self.temperature, top_p=self.top_p, top_k=max(self.top_k, 0), seed=self.seed,
            max_tokens=self.max_tokens if self.max_tokens is not None else default_max_tokens, stop=stop,
            ignore_eos=self.ignore_eos,
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class CompletionRequest(_Sampling):
    prompt: str | list[int] = Field(min_length=1)


class ChatMessage(BaseModel):
    role: str
    content: str


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None


class BadRequest(Exception):
    pass


def error_response(message: str, status: int = 400) -> JSONResponse:
    kind = "BadRequestError" if status == 400 else "NotFoundError" if status == 404 else "InternalServerError"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}}, status_code=status)


def create_app(loop: EngineLoop) -> FastAPI:
    app = FastAPI(title="workbench serve")
    engine = loop.engine
    tokenizer = engine.tokenizer
    created = int(time.time())

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(part) for part in item['loc'][1:]) or 'body'}: {item['msg']}" for item in error.errors())
        return error_response(f"invalid request: {problems}")

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, error: BadRequest) -> JSONResponse:
        return error_response(str(error))

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict:
        return {"version": package_version("workbench")}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(loop.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": loop.model_name, "object": "model", "created": created,
                                            "owned_by": "workbench", "max_model_len": engine.max_model_len}]}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest):
        if isinstance(body.prompt, str):
            prompt_ids = _encode(tokenizer, body.prompt)
        else:
            prompt_ids = list(body.prompt)
        return await _serve(loop, body, prompt_ids, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest):
        if tokenizer is None or not tokenizer.chat_template:
            raise BadRequest(f"model {loop.model_name!r} has no chat template: use /v1/completions")
        text = tokenizer.apply_chat_template([message.model_dump() for message in body.messages])
        if body.max_completion_tokens is not None and body.max_tokens is None:
            body.max_tokens = body.max_completion_tokens
        return await _serve(loop, body, _encode(tokenizer, text), chat=True)

    return app


def _encode(tokenizer: Tokenizer | None, text: str) -> list[int]:
    if tokenizer is None:
        raise BadRequest("this model has no tokenizer (a simulated model): send the prompt as token ids")
    return tokenizer.encode(text)


async def _serve(loop: EngineLoop, body: _Sampling, prompt_ids: list[int], *, chat: bool):
    """Submit, wait for the first event (a rejection answers 400), then stream or collect."""
    engine = loop.engine
    try:
        params = body.sampling_params(default_max_tokens=max(1, engine.max_model_len - len(prompt_ids)))
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        outputs = await loop.submit(request_id, prompt_ids, params)
    except EngineError as error:
        raise BadRequest(str(error)) from error
    first: RequestOutput = await outputs.get()
    if first.finish_reason == "rejected":
        raise BadRequest(first.metrics.finish_detail or "the request can never run on this server")
    response = _Response(request_id, loop.model_name, len(prompt_ids), engine.tokenizer, chat, body.return_token_ids)
    if not body.stream:
        output = first
        while not output.finished:
            output = await outputs.get()
        return response.whole(output)
    return StreamingResponse(_stream(loop, response, first, outputs, body.include_usage), media_type="text/event-stream")


async def _stream(loop: EngineLoop, response: _Response, first: RequestOutput, outputs, include_usage: bool) -> AsyncIterator[str]:
    output = first
    try:
        while True:
            yield _event(response.chunk(output))
            if output.finished:
                break
            output = await outputs.get()
        if include_usage:
            yield _event(response.usage_chunk(output))
        yield "data: [DONE]\n\n"
    finally:
        if not output.finished:  # the client went away: stop the work and free the blocks
            loop.abort(response.request_id)


def _event(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


class _Response:
    """The OpenAI shapes of one request's answer: whole, or chunk by chunk with text deltas."""

    def __init__(self, request_id: str, model: str, prompt_tokens: int, tokenizer: Tokenizer | None, chat: bool,
                 return_token_ids: bool):
        self.request_id, self.model, self.prompt_tokens = request_id, model, prompt_tokens
        self.tokenizer, self.chat, self.return_token_ids = tokenizer, chat, return_token_ids
        self.created = int(time.time())
        self._text_sent = ""

    def _head(self, streaming: bool) -> dict:
        kind = ("chat.completion" if self.chat else "text_completion") + (".chunk" if streaming and self.chat else "")
        return {"id": self.request_id, "object": kind, "created": self.created, "model": self.model}

    def _text(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids) if self.tokenizer else ""

    def _delta(self, output: RequestOutput) -> str:
        """New text since the last chunk; a partial UTF-8 character waits for its next token."""
        text = self._text(output.token_ids)
        if text.endswith("\ufffd") and not output.finished:
            return ""
        delta, self._text_sent = text[len(self._text_sent):], text
        return delta

    def _usage(self, output: RequestOutput) -> dict:
        completion = len(output.token_ids)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion, "total_tokens": self.prompt_tokens + completion}

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
        choice = self._choice(self._text(output.token_ids), output.token_ids, output.finish_reason, streaming=False)
        return {**self._head(streaming=False), "choices": [choice], "usage": self._usage(output)}

    def chunk(self, output: RequestOutput) -> dict:
        reason = output.finish_reason if output.finished else None
        choice = self._choice(self._delta(output), output.new_token_ids, reason, streaming=True)
        return {**self._head(streaming=True), "choices": [choice]}

    def usage_chunk(self, output: RequestOutput) -> dict:
        return {**self._head(streaming=True), "choices": [], "usage": self._usage(output)}

