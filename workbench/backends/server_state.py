"""A serving engine's state from its Prometheus `/metrics` text, whichever engine it is.

Parsed with prometheus_client's own text parser, then read by metric name:

  vLLM       vllm:kv_cache_usage_perc (older: vllm:gpu_cache_usage_perc; a fraction),
             vllm:num_requests_waiting, vllm:num_requests_running, vllm:num_preemptions_total,
             vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total, vllm:prompt_tokens_total,
             vllm:generation_tokens_total, vllm:spec_decode_num_drafts_total,
             vllm:spec_decode_num_draft_tokens_total, vllm:spec_decode_num_accepted_tokens_total (a
             server that speculates), and vllm:cache_config_info's labels num_gpu_blocks,
             block_size for the capacity (`workbench serve` exposes the same names)
  llama.cpp  llamacpp:kv_cache_usage_ratio, llamacpp:requests_processing, llamacpp:requests_deferred
  SGLang     sglang:token_usage, sglang:num_queue_reqs, sglang:num_running_reqs

Series with labels (one per model) are summed, except the KV usage fraction, which is the largest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

KV_USAGE = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "llamacpp:kv_cache_usage_ratio",
    "sglang:token_usage",
)
WAITING = ("vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs")
RUNNING = ("vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs")
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
PROMPT_TOKENS = ("vllm:prompt_tokens_total", "vllm:prompt_tokens")
GENERATION_TOKENS = ("vllm:generation_tokens_total", "vllm:generation_tokens")
SPEC_DRAFTS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts")
SPEC_DRAFT_TOKENS = ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_draft_tokens")
SPEC_ACCEPTED_TOKENS = ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens")


@dataclass
class ServerState:
    kv_usage: float | None = None  # fraction of the KV cache in use
    num_waiting: int | None = None
    num_running: int | None = None
    preemptions_total: int | None = None
    prefix_queries_total: int | None = None
    prefix_hits_total: int | None = None
    prompt_tokens_total: int | None = None
    generation_tokens_total: int | None = None
    spec_drafts_total: int | None = None  # decode rows that speculated
    spec_draft_tokens_total: int | None = None  # tokens they proposed
    spec_accepted_tokens_total: int | None = None  # of those, accepted
    num_blocks: int | None = None  # KV capacity, where the server says (vllm:cache_config_info)
    block_size: int | None = None


def parse_server_state(text: str) -> ServerState:
    """The state in one scrape; fields the server does not expose, or gives as NaN or infinity,
    stay None. ValueError, naming the problem, for text that is not Prometheus' format."""
    samples: dict[str, list[tuple[dict, float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if math.isfinite(sample.value):
                    samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    except Exception as error:  # noqa: BLE001 - the parser raises several types for malformed text
        raise ValueError(f"not Prometheus text format ({type(error).__name__}: {str(error)[:200]})") from None

    def total(names: tuple[str, ...]) -> float | None:
        for name in names:
            if name in samples:
                return sum(value for _, value in samples[name])
        return None

    def count(names: tuple[str, ...]) -> int | None:
        value = total(names)
        return None if value is None else int(round(value))

    usage = next((max(value for _, value in samples[name]) for name in KV_USAGE if name in samples), None)
    state = ServerState(
        kv_usage=usage,
        num_waiting=count(WAITING),
        num_running=count(RUNNING),
        preemptions_total=count(PREEMPTIONS),
        prefix_queries_total=count(PREFIX_QUERIES),
        prefix_hits_total=count(PREFIX_HITS),
        prompt_tokens_total=count(PROMPT_TOKENS),
        generation_tokens_total=count(GENERATION_TOKENS),
        spec_drafts_total=count(SPEC_DRAFTS),
        spec_draft_tokens_total=count(SPEC_DRAFT_TOKENS),
        spec_accepted_tokens_total=count(SPEC_ACCEPTED_TOKENS),
    )
    for labels, _ in samples.get("vllm:cache_config_info", []):
        if labels.get("num_gpu_blocks", "").isdigit():
            state.num_blocks = int(labels["num_gpu_blocks"])
        if labels.get("block_size", "").isdigit():
            state.block_size = int(labels["block_size"])
    return state
