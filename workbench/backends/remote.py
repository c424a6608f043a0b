"""An OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, `workbench serve`) behind the
Backend protocol.

Each request is one streaming call (`stream: true`, usage in the stream, `ignore_eos` so output
lengths follow the preset, `return_token_ids` to count tokens as the server made them): to
`/v1/chat/completions` with the chat messages for a chat-templated prompt (ShareGPT on a model
with a chat template), so that the server applies its own template; otherwise to
`/v1/completions` with the prompt as token ids. Latency is measured on
this side, as `vllm bench serve` does: from the request's arrival time in the schedule to each
streamed chunk. The server's state comes from its Prometheus `/metrics`, scraped every 250 ms;
each scrape is a state update in the run log. A server without `/metrics` gets client-side
figures only, and the capabilities say so.

All network work runs on one asyncio event loop in its own thread with one aiohttp session
(async streaming, HTTP/1.1 keep-alive), as `vllm bench serve` does. aiohttp rather than httpx:
with 2,000 streams in flight, httpx's connection pool (httpcore 1.0.9) spent two thirds of this
thread rescanning its connections on every request event (docs/servers.md, "Thousands of streams"). The
pool grows to the traffic's peak concurrency unless `max_concurrency` caps it (as `vllm bench
serve --max-concurrency`): a cap would hold open-loop arrivals back on this side and hide the
server's own queueing. The runner's thread only submits,
aborts and collects events. An HTTP error, a timeout (`request_timeout_s` of silence), a dropped
stream or data that is not what the OpenAI API sends (a token id that is not a non-negative
integer, a usage count that is not a count, an event that is not JSON, a line over 512 KiB)
ends that request with finish reason "error" and the problem in its metrics; the run goes on, and
every request ends. A `/metrics` answer that cannot be read is a failed scrape, counted; a scraper
that stops is a problem the run reports (`problems()`), which marks it incomplete.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections import deque

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from engine.errors import EngineError
from engine.loading.tokenizer import Tokenizer
from engine.requests.metrics import RequestMetrics, StepStats
from engine.requests.outputs import RequestOutput
from engine.requests.sampling_params import SamplingParams
from workbench.backends.protocol import BackendCapabilities, BackendUpdate, Chat, RequestProgress
from workbench.backends.server_state import ServerState, parse_server_state
from workbench.machine.process_tuning import allow_open_files
from workbench.machine.provenance import package_version

SCRAPE_INTERVAL_S = 0.25
# A request whose server sends nothing for this long ends with an error (`--request-timeout`).
DEFAULT_REQUEST_TIMEOUT_S = 600.0
_EVENT_WAIT_S = 0.005  # how long advance() waits for something to happen before it returns empty
ERROR = "error"  # the finish reason of a request the server or the network failed


@dataclasses.dataclass
class _InFlight:
    prompt_token_ids: list[int]
    metrics: RequestMetrics
    output_token_ids: list[int] = dataclasses.field(default_factory=list)
    task: asyncio.Task | None = None


class RemoteBackend:
    def __init__(
        self,
        base_url: str,
        tokenizer: Tokenizer,
        *,
        model: str | None = None,
        max_concurrency: int | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ):
        self.base_url = base_url.rstrip("/")
        self.tokenizer, self.vocab_size = tokenizer, tokenizer.vocab_size
        self.clock, self.sleep, self.idle_wait_is_free = time.perf_counter, time.sleep, False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="remote-backend", daemon=True)
        self._thread.start()
        allow_open_files()  # one socket per stream
        self.request_timeout_s = request_timeout_s
        self._session: aiohttp.ClientSession = self._call(self._make_session(max_concurrency or 0))
        self._events: deque[RequestOutput] = deque()
        self._states: deque[StepStats] = deque()
        self._ready = threading.Condition()
        self._requests: dict[str, _InFlight] = {}
        self.scrapes, self.scrapes_failed = 0, 0
        self._scrape_problem: str | None = None  # the last failed scrape's reason
        self._scraper_stopped: str | None = None
        try:
            self.model, self.max_model_len, self._server_version = self._call(self._probe(model))
            first_state = self._call(self._scrape())
        except BaseException:
            self.close()
            raise
        self.capabilities = _capabilities(first_state)
        self.name = f"{self.base_url} ({self.model})"
        self.num_kv_blocks = first_state.num_blocks if first_state else None
        block_size = first_state.block_size if first_state else None
        self.kv_capacity_tokens = self.num_kv_blocks * block_size if self.num_kv_blocks and block_size else None
        self.kv_cache_bytes = None
        # The first scrape is the baseline of the counters: what the server adds after it is the
        # first interval's (tokens prefilled before the next scrape were lost).
        self._last_state = (time.perf_counter(), first_state) if first_state else None
        self._scraper = asyncio.run_coroutine_threadsafe(self._scrape_forever(), self._loop) if first_state else None
        if self._scraper is not None:
            self._scraper.add_done_callback(self._scraper_ended)

    # ----- the protocol --------------------------------------------------------------------------

    def describe(self) -> dict:
        return {
            "versions": {
                "workbench": package_version("workbench"),
                "server": self.base_url,
                "server_version": self._server_version,
                "model": self.model,
            },
            "engine": {
                "server": self.base_url,
                "model": self.model,
                "max_model_len": self.max_model_len,
                "kv_blocks": self.num_kv_blocks,
                "kv_capacity_tokens": self.kv_capacity_tokens,
                # Why the server's state is missing, when /metrics answered but could not be read.
                "server_state_problem": self._scrape_problem if self._scraper is None else None,
            },
        }

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
        prompt_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if len(prompt_ids) + params.max_tokens > self.max_model_len:
            raise EngineError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) exceed the server's "
                f"max_model_len ({self.max_model_len})"
            )
        request = _InFlight(prompt_ids, RequestMetrics(arrival_time=arrival_time, num_prompt_tokens=len(prompt_ids)))
        self._requests[request_id] = request
        body = {
            "model": self.model,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "ignore_eos": params.ignore_eos,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
        }
        if messages:
            path, body["messages"] = "/v1/chat/completions", list(messages)
        else:
            path, body["prompt"] = "/v1/completions", prompt_ids
        if params.top_k:
            body["top_k"] = params.top_k
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = params.stop
        self._loop.call_soon_threadsafe(self._start, request_id, path, body)
        return request_id

    def abort(self, request_id: str) -> None:
        """Close the request's stream; it ends with reason "abort". Done on the event loop, after
        the `_start` that `submit` queued there (its callbacks run in order): an abort right after
        submit found no task yet and was lost (20 of 20 such requests ran to their length)."""
        if request_id in self._requests:
            self._loop.call_soon_threadsafe(self._cancel, request_id)

    def _cancel(self, request_id: str) -> None:
        request = self._requests.get(request_id)
        if request is not None and request.task is not None:
            request.task.cancel()

    def has_unfinished(self) -> bool:
        return bool(self._requests or self._events)

    def advance(self, until: float | None = None) -> BackendUpdate:
        with self._ready:
            if not self._events and not self._states:
                self._ready.wait(_EVENT_WAIT_S)
            outputs, states = list(self._events), list(self._states)
            self._events.clear()
            self._states.clear()
        return BackendUpdate(outputs=outputs, stats=_merged(states))

    def progress(self, request_id: str) -> RequestProgress | None:
        request = self._requests.get(request_id)
        if request is None:
            return None
        state = "running" if request.output_token_ids else "waiting"
        return RequestProgress(
            state,
            request.metrics,
            len(request.prompt_token_ids),
            len(request.prompt_token_ids) + len(request.output_token_ids),
        )

    def block_owners(self, rows: dict[str, int]) -> None:
        return None

    def window_blocks(self) -> None:
        return None

    def problems(self) -> list[str]:
        """The server-state scraper's troubles: it stopped (the run is incomplete), or some scrapes
        failed (counted, with the last reason)."""
        found = []
        if self._scraper_stopped is not None:
            found.append(f"server state: the /metrics scraper stopped: {self._scraper_stopped}")
        if self.scrapes_failed:
            found.append(
                f"server state: {self.scrapes_failed} of {self.scrapes} /metrics scrapes failed, so the server's "
                f"state has gaps (last: {self._scrape_problem})"
            )
        return found

    def warm_up_progress(self) -> None:
        """A server warms up before it answers: nothing left to wait for once connected."""
        return None

    def stop_background_work(self) -> None:
        """Nothing to stop: its scraper and streams may run beside another backend's load."""

    def close(self) -> None:
        """Cancel what is in flight and stop the event loop."""
        if self._loop.is_running():
            if getattr(self, "_scraper", None) is not None:
                self._scraper.cancel()
            for request in list(self._requests.values()):
                if request.task is not None:
                    self._loop.call_soon_threadsafe(request.task.cancel)
            if getattr(self, "_session", None) is not None:
                self._call(self._session.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    # ----- the event loop's side -----------------------------------------------------------------

    def _call(self, coroutine):
        """Run a coroutine on the event loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _make_session(self, max_connections: int) -> aiohttp.ClientSession:
        # A stream may wait in the server's queue, then generate for long: only silence ends it.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=self.request_timeout_s)
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections, limit_per_host=0), timeout=timeout
        )

    async def _get(self, path: str) -> tuple[int, str]:
        async with self._session.get(self.base_url + path) as response:
            return response.status, await response.text()

    async def _probe(self, model: str | None) -> tuple[str, int, str | None]:
        """(model name, max_model_len, server version), or one clear error before the run starts."""
        try:
            status, text = await self._get("/v1/models")
        except (aiohttp.ClientError, TimeoutError) as error:
            raise EngineError(f"{self.base_url}: no server answers ({_describe(error)})") from error
        served = _model_list(text)
        if served is None:
            raise EngineError(
                f"{self.base_url}/v1/models answered HTTP {status} without a model list: not an "
                f'OpenAI-compatible server (expected {{"data": [{{"id": NAME, ...}}, ...]}}, got {text[:120]!r})'
            )
        names = [entry["id"] for entry in served]
        if model is None:
            if not names:
                raise EngineError(f"{self.base_url} serves no model")
            model = names[0]
        elif model not in names:
            raise EngineError(f"{self.base_url} does not serve {model!r}; it serves {', '.join(map(str, names))}")
        max_model_len = served[names.index(model)].get("max_model_len")
        if max_model_len is None:
            max_model_len = 2048  # llama.cpp and SGLang may not say
        elif isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 1:
            raise EngineError(
                f"{self.base_url}/v1/models: max_model_len of {model!r}: expected a positive integer, "
                f"got {max_model_len!r}"
            )
        version = None
        try:
            status, text = await self._get("/version")
            if status == 200:
                version = json.loads(text).get("version")
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
            pass  # the version is provenance, not a requirement
        return model, max_model_len, version

    async def _scrape(self) -> ServerState | None:
        """The server's state, or None (with the reason kept) when /metrics cannot be read."""
        try:
            status, text = await self._get("/metrics")
            if status != 200:
                raise ValueError(f"HTTP {status}")
            return parse_server_state(text)
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as error:
            self._scrape_problem = f"GET /metrics: {_describe(error)}"
            return None

    async def _scrape_forever(self) -> None:
        while True:
            started = time.perf_counter()
            state = await self._scrape()
            self.scrapes += 1
            if state is not None:
                self._record_state(time.perf_counter(), state)
            else:
                self.scrapes_failed += 1
            await asyncio.sleep(max(0.0, SCRAPE_INTERVAL_S - (time.perf_counter() - started)))

    def _scraper_ended(self, future) -> None:
        if not future.cancelled() and future.exception() is not None:
            self._scraper_stopped = _describe(future.exception())

    def _record_state(self, now: float, state: ServerState) -> None:
        """One scrape as a StepStats: prefill and decode tokens, and speculative proposals and
        acceptances, are what the counters added since the last scrape; KV blocks from the usage
        fraction and the capacity where known."""
        previous = self._last_state
        self._last_state = (now, state)
        if previous is None:
            return
        before_time, before = previous
        total = state.num_blocks or 10_000  # without a capacity: the fraction in 0.01% steps
        stats = StepStats(
            time_s=now,
            step_duration_s=now - before_time,
            prefill_tokens=_delta(state.prompt_tokens_total, before.prompt_tokens_total),
            # Generated tokens less the accepted proposals among them, which are counted apart.
            decode_tokens=_delta(state.generation_tokens_total, before.generation_tokens_total)
            - _delta(state.spec_accepted_tokens_total, before.spec_accepted_tokens_total),
            num_seqs=state.num_running or 0,
            kv_blocks_used=round((state.kv_usage or 0.0) * total),
            kv_blocks_total=total,
            kv_blocks_cached_free=0,
            num_waiting=state.num_waiting or 0,
            num_waiting_long=0,
            num_running=state.num_running or 0,
            preemptions_total=state.preemptions_total or 0,
            rejections_total=0,
            prefix_cache_hit_tokens_total=state.prefix_hits_total or 0,
            prefix_cache_query_tokens_total=state.prefix_queries_total or 0,
            speculating_rows=_delta(state.spec_drafts_total, before.spec_drafts_total),
            proposed_tokens=_delta(state.spec_draft_tokens_total, before.spec_draft_tokens_total),
            accepted_tokens=_delta(state.spec_accepted_tokens_total, before.spec_accepted_tokens_total),
        )
        with self._ready:
            self._states.append(stats)
            self._ready.notify()

    def _start(self, request_id: str, path: str, body: dict) -> None:
        request = self._requests[request_id]
        request.task = self._loop.create_task(self._stream(request_id, request, path, body))
        # A task cancelled before its first step never runs `_stream`, whose `finally` ends the request.
        request.task.add_done_callback(lambda task: self._end_if_never_started(request_id, request, task))

    def _end_if_never_started(self, request_id: str, request: _InFlight, task: asyncio.Task) -> None:
        if task.cancelled() and request_id in self._requests and request.metrics.finish_reason is None:
            self._finish(request_id, request, "abort", "aborted by the client before it was sent")

    async def _stream(self, request_id: str, request: _InFlight, path: str, body: dict) -> None:
        reason, detail = ERROR, ""
        try:
            async with self._session.post(self.base_url + path, json=body) as response:
                if response.status != 200:
                    message = (await response.read()).decode(errors="replace")[:500]
                    detail = f"HTTP {response.status}: {message}"
                    return
                async for raw_line in response.content:  # server-sent events, a line at a time
                    line = raw_line.decode().strip()
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = _chunk(line[len("data: ") :])
                    usage = chunk.get("usage")
                    if usage:
                        request.metrics.num_prompt_tokens = _count_field(
                            usage, "prompt_tokens", request.metrics.num_prompt_tokens
                        )
                    for choice in chunk.get("choices") or []:
                        self._tokens_arrived(request_id, request, choice)
                        if choice.get("finish_reason"):
                            reason = str(choice["finish_reason"])
                if reason == ERROR:
                    detail = "the stream ended without a finish reason"
        except asyncio.CancelledError:
            reason, detail = "abort", "aborted by the client"
        except TimeoutError:
            reason, detail = (
                ERROR,
                f"timed out: the server sent nothing for {self.request_timeout_s:g} s (--request-timeout)",
            )
        except ServerDataError as error:
            reason, detail = ERROR, f"the server sent {error}"
        except LineTooLong:
            reason, detail = ERROR, "the server sent an event line over 512 KiB (aiohttp's limit)"
        except Exception as error:  # noqa: BLE001 - whatever the server or network does, the request must end
            reason, detail = ERROR, _describe(error)
        finally:
            self._finish(request_id, request, reason, detail)

    def _tokens_arrived(self, request_id: str, request: _InFlight, choice: dict) -> None:
        now = time.perf_counter()
        if not isinstance(choice, dict):
            raise ServerDataError(f"a choice that is not an object: {choice!r:.120}")
        new_ids = choice.get("token_ids")
        if new_ids is None:  # a server that does not return token ids: one token per chunk with text
            new_ids = [0] if choice.get("text") or (choice.get("delta") or {}).get("content") else []
        elif not isinstance(new_ids, list) or not all(_is_token(token) for token in new_ids):
            raise ServerDataError(f"token_ids that are not non-negative integers: {new_ids!r:.120}")
        if not new_ids:
            return
        metrics = request.metrics
        if metrics.first_token_time is None:
            metrics.first_token_time = now
        metrics.token_times.extend([now] * len(new_ids))
        request.output_token_ids.extend(new_ids)
        # The output list itself, as the engine hands it out: copying it per chunk cost O(tokens²) per stream.
        self._emit(RequestOutput(request_id, new_ids, request.output_token_ids, False, None, None, metrics))

    def _finish(self, request_id: str, request: _InFlight, reason: str, detail: str) -> None:
        metrics = request.metrics
        metrics.finish_time, metrics.finish_reason, metrics.finish_detail = time.perf_counter(), reason, detail
        try:
            text = self.tokenizer.decode(request.output_token_ids)
        except Exception:  # noqa: BLE001 - ids a server without token ids stood in for; the end is what matters
            text = None
        self._emit(RequestOutput(request_id, [], request.output_token_ids, True, reason, text, metrics))
        self._requests.pop(request_id, None)  # after the event: has_unfinished() never misses the end

    def _emit(self, output: RequestOutput) -> None:
        with self._ready:
            self._events.append(output)
            self._ready.notify()


class ServerDataError(ValueError):
    """Data from the server that is not what the OpenAI API sends."""


def _chunk(payload: str) -> dict:
    try:
        chunk = json.loads(payload)
    except ValueError:
        raise ServerDataError(f"an event that is not JSON: {payload[:120]!r}") from None
    if not isinstance(chunk, dict) or not isinstance(chunk.get("choices", []), (list, type(None))):
        raise ServerDataError(f"an event that is not a completion chunk: {payload[:120]!r}")
    if chunk.get("usage") is not None and not isinstance(chunk["usage"], dict):
        raise ServerDataError(f"a usage that is not an object: {chunk['usage']!r:.120}")
    return chunk


def _count_field(record: dict, key: str, default: int) -> int:
    value = record.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ServerDataError(f"usage.{key} that is not a count: {value!r:.60}")
    return value


def _is_token(token) -> bool:
    """No upper bound: a server's vocabulary may be larger than its tokenizer's (padded embeddings)."""
    return isinstance(token, int) and not isinstance(token, bool) and token >= 0


def _model_list(text: str) -> list[dict] | None:
    """/v1/models' entries (each a dict with a string id), or None if the answer is no such list."""
    try:
        served = json.loads(text)
    except ValueError:
        return None
    served = served.get("data") if isinstance(served, dict) else None
    if not isinstance(served, list) or not all(
        isinstance(entry, dict) and isinstance(entry.get("id"), str) for entry in served
    ):
        return None
    return served


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _merged(states: list[StepStats]) -> StepStats | None:
    """The scrapes since the last update as one: the counters' additions and the time summed over
    them, the gauges the latest's (only the latest was kept, and the tokens of the others lost)."""
    if not states:
        return None
    return dataclasses.replace(
        states[-1],
        step_duration_s=sum(state.step_duration_s for state in states),
        prefill_tokens=sum(state.prefill_tokens for state in states),
        decode_tokens=sum(state.decode_tokens for state in states),
        speculating_rows=sum(state.speculating_rows for state in states),
        proposed_tokens=sum(state.proposed_tokens for state in states),
        accepted_tokens=sum(state.accepted_tokens for state in states),
    )


def _delta(now: int | None, before: int | None) -> int:
    return max(0, (now or 0) - (before or 0))


def _capabilities(state: ServerState | None) -> BackendCapabilities:
    if state is None:
        return BackendCapabilities(token_ids=True)
    return BackendCapabilities(
        kv_cache=state.kv_usage is not None,
        queues=state.num_waiting is not None and state.num_running is not None,
        preemptions=state.preemptions_total is not None,
        prefix_cache=state.prefix_queries_total is not None,
        token_ids=True,
    )
