"""The server's Prometheus metrics, under vLLM's names and types, so that dashboards and the
workbench's own remote backend read our server as they read vLLM:

  gauges      vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc
              (a fraction, 1 = full, as vLLM's), vllm:cache_config_info (labels: block_size,
              num_gpu_blocks)
  counters    vllm:num_preemptions, vllm:prompt_tokens, vllm:generation_tokens,
              vllm:prefix_cache_queries, vllm:prefix_cache_hits, vllm:request_success,
              vllm:spec_decode_num_drafts, vllm:spec_decode_num_draft_tokens,
              vllm:spec_decode_num_accepted_tokens (exposed with the _total suffix; the last three
              count decode rows that speculated, tokens they proposed and tokens accepted, as vLLM V1's)
  histograms  vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
              vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from engine.requests.metrics import RequestMetrics, StepStats

# No "_created" series next to each counter and histogram, as vLLM's /metrics.
disable_created_metrics()

# vLLM's buckets for these histograms (seconds).
_TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
)


class ServerMetrics:
    def __init__(self, model_name: str, block_size: int, num_blocks: int):
        self.registry = CollectorRegistry()
        labels = {"model_name": model_name}
        registry = self.registry

        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(name, documentation, list(labels), registry=registry).labels(**labels)

        def counter(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, list(labels), registry=registry).labels(**labels)

        def histogram(name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, documentation, list(labels), buckets=buckets, registry=registry).labels(**labels)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemptions.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self.spec_drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
        self.spec_draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
        self.spec_accepted_tokens = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=registry,
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _TTFT_BUCKETS
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _ITL_BUCKETS
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", _REQUEST_BUCKETS
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", _REQUEST_BUCKETS
        )
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            ["block_size", "num_gpu_blocks"],
            registry=registry,
        )
        info.labels(block_size=str(block_size), num_gpu_blocks=str(num_blocks)).set(1)
        self._model_name, self._num_blocks = model_name, num_blocks
        self._last_totals = (0, 0, 0)  # preemptions, prefix hits, prefix queries counted so far

    def step(self, stats: StepStats, generated_tokens: int) -> None:
        """After every engine step: the gauges, and the counters by what the step added."""
        self._gauges(
            stats.num_running, stats.num_waiting + stats.num_waiting_long, stats.kv_blocks_used, stats.kv_blocks_total
        )
        self.prompt_tokens.inc(stats.prefill_tokens)
        self.generation_tokens.inc(generated_tokens)
        totals = (stats.preemptions_total, stats.prefix_cache_hit_tokens_total, stats.prefix_cache_query_tokens_total)
        preemptions, hits, queries = (now - before for now, before in zip(totals, self._last_totals))
        self.preemptions.inc(preemptions)
        self.prefix_hits.inc(hits)
        self.prefix_queries.inc(queries)
        self._last_totals = totals
        self.spec_drafts.inc(stats.speculating_rows)
        self.spec_draft_tokens.inc(stats.proposed_tokens)
        self.spec_accepted_tokens.inc(stats.accepted_tokens)

    def idle(self, used_blocks: int) -> None:
        """No request left: nothing runs or waits, and the KV usage is what is still held (0)."""
        self._gauges(0, 0, used_blocks, self._num_blocks)

    def _gauges(self, running: int, waiting: int, used_blocks: int, total_blocks: int) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(used_blocks / total_blocks)

    def request_ended(self, metrics: RequestMetrics) -> None:
        if metrics.finish_reason == "rejected":  # as vLLM: a refused request is no success (it got a 400)
            return
        self.success.labels(model_name=self._model_name, finished_reason=metrics.finish_reason).inc()
        if metrics.ttft_ms is not None:
            self.ttft.observe(metrics.ttft_ms / 1000)
        for before, after in zip(metrics.token_times, metrics.token_times[1:]):
            self.itl.observe(after - before)
        if metrics.e2e_ms is not None:
            self.e2e.observe(metrics.e2e_ms / 1000)
        if metrics.queue_time_ms is not None:
            self.queue.observe(metrics.queue_time_ms / 1000)
