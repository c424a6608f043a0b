"""A fake OpenAI-compatible server that misbehaves as told: odd /v1/models answers, /metrics text
that is not Prometheus', streamed events that are not what the API sends, or silence. Served on
loopback by tests/workbench/loopback_app.py."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, StreamingResponse

GOOD_METRICS = (
    "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.25\n"
)
GARBAGE = '\x00 this is {not} prometheus text "\n'


def token_event(token_ids, finish_reason=None) -> str:
    return json.dumps({"choices": [{"index": 0, "text": "x", "token_ids": token_ids, "finish_reason": finish_reason}]})


@dataclass
class Misbehaviour:
    models: str = json.dumps({"data": [{"id": "fake", "max_model_len": 2048}]})
    metrics: list[str] = field(default_factory=lambda: [GOOD_METRICS])  # per scrape; the last one repeats
    # Each request's stream: the payloads after "data: " (the server adds [DONE]).
    events: list[str] = field(default_factory=lambda: [token_event([5]), token_event([6], "length")])
    silent: bool = False  # accept the request, then send nothing
    event_gap_s: float = 0.0  # a pause before each event after the first
    scrapes: int = 0


def misbehaving_app(behaviour: Misbehaviour) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return PlainTextResponse(behaviour.models, media_type="application/json")

    @app.get("/metrics")
    async def metrics():
        text = behaviour.metrics[min(behaviour.scrapes, len(behaviour.metrics) - 1)]
        behaviour.scrapes += 1
        return PlainTextResponse(text)

    async def stream():
        if behaviour.silent:
            await asyncio.sleep(3600)
        for number, payload in enumerate(behaviour.events):
            if number:
                await asyncio.sleep(behaviour.event_gap_s)
            yield f"data: {payload}\n\n"
        yield "data: [DONE]\n\n"

    @app.post("/v1/completions")
    async def completions():
        return StreamingResponse(stream(), media_type="text/event-stream")

    return app
