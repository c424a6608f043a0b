"""`workbench serve`'s Prometheus metrics and the parser that reads any server's: what the server
exports is what a scrape reads back (fractions as fractions, seconds as seconds, each counter
under its own name), and each engine's names are understood. Fast: no model, no server."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from engine.requests.metrics import RequestMetrics, StepStats
from workbench.backends.remote import _delta
from workbench.backends.server_state import parse_server_state
from workbench.server.metrics import ServerMetrics


def stats(**changes) -> StepStats:
    values = dict(
        time_s=1.0,
        step_duration_s=0.01,
        prefill_tokens=64,
        decode_tokens=3,
        num_seqs=4,
        kv_blocks_used=25,
        kv_blocks_total=100,
        kv_blocks_cached_free=0,
        num_waiting=2,
        num_waiting_long=1,
        num_running=3,
        preemptions_total=4,
        rejections_total=0,
        prefix_cache_hit_tokens_total=30,
        prefix_cache_query_tokens_total=100,
    )
    return StepStats(**{**values, **changes})


def samples(metrics: ServerMetrics) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    return {
        sample.name + json.dumps(sample.labels, sort_keys=True): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_what_the_server_exports_a_scrape_reads_back():
    metrics = ServerMetrics("m", block_size=16, num_blocks=100)
    metrics.step(stats(), generated_tokens=3)
    state = parse_server_state(generate_latest(metrics.registry).decode())
    assert (state.kv_usage, state.num_running, state.num_waiting) == (0.25, 3, 3)  # a fraction; both waiting queues
    assert (state.preemptions_total, state.prefix_hits_total, state.prefix_queries_total) == (4, 30, 100)
    assert (state.prompt_tokens_total, state.generation_tokens_total) == (64, 3)
    assert (state.num_blocks, state.block_size) == (100, 16)
    metrics.step(
        stats(
            preemptions_total=6,
            prefix_cache_hit_tokens_total=45,
            prefix_cache_query_tokens_total=130,
            prefill_tokens=10,
            kv_blocks_used=50,
        ),
        generated_tokens=5,
    )
    later = parse_server_state(generate_latest(metrics.registry).decode())
    assert (later.preemptions_total, later.prefix_hits_total, later.prefix_queries_total) == (6, 45, 130)
    assert (later.prompt_tokens_total, later.generation_tokens_total, later.kv_usage) == (74, 8, 0.5)
    metrics.idle(used_blocks=0)
    idle = parse_server_state(generate_latest(metrics.registry).decode())
    assert (idle.kv_usage, idle.num_running, idle.num_waiting) == (0.0, 0, 0)


def test_speculative_decoding_counters_are_vllms_and_a_scrape_reads_them_back():
    metrics = ServerMetrics("m", block_size=16, num_blocks=100)
    metrics.step(stats(speculating_rows=2, proposed_tokens=6, accepted_tokens=4), generated_tokens=6)
    metrics.step(stats(speculating_rows=1, proposed_tokens=3, accepted_tokens=0), generated_tokens=1)
    values = samples(metrics)
    label = json.dumps({"model_name": "m"})
    assert values["vllm:spec_decode_num_drafts_total" + label] == 3
    assert values["vllm:spec_decode_num_draft_tokens_total" + label] == 9
    assert values["vllm:spec_decode_num_accepted_tokens_total" + label] == 4
    state = parse_server_state(generate_latest(metrics.registry).decode())
    assert (state.spec_drafts_total, state.spec_draft_tokens_total, state.spec_accepted_tokens_total) == (3, 9, 4)


def test_latency_histograms_are_in_seconds_and_rejections_are_not_successes():
    metrics = ServerMetrics("m", block_size=16, num_blocks=100)
    metrics.request_ended(
        RequestMetrics(
            arrival_time=10.0,
            num_prompt_tokens=5,
            first_scheduled_time=10.1,
            first_token_time=10.25,
            finish_time=10.75,
            token_times=[10.25, 10.5, 10.75],
            finish_reason="length",
        )
    )
    metrics.request_ended(
        RequestMetrics(arrival_time=11.0, num_prompt_tokens=5, finish_time=11.0, finish_reason="rejected")
    )
    values = samples(metrics)
    label = json.dumps({"model_name": "m"})
    assert values["vllm:time_to_first_token_seconds_sum" + label] == pytest.approx(0.25)
    assert values["vllm:e2e_request_latency_seconds_sum" + label] == pytest.approx(0.75)
    assert values["vllm:request_queue_time_seconds_sum" + label] == pytest.approx(0.1)
    assert values["vllm:inter_token_latency_seconds_sum" + label] == pytest.approx(0.5)
    assert values["vllm:inter_token_latency_seconds_count" + label] == 2
    assert (
        values[
            "vllm:request_success_total" + json.dumps({"finished_reason": "length", "model_name": "m"}, sort_keys=True)
        ]
        == 1
    )
    assert not any("rejected" in key for key in values)


def test_scrape_deltas_are_what_a_counter_added_never_negative():
    assert _delta(10, 4) == 6 and _delta(4, 10) == 0  # a counter reset (server restart) is no negative rate
    assert _delta(None, 4) == 0 and _delta(7, None) == 7


def test_unreadable_metrics_text_is_one_value_error_and_non_finite_values_are_missing():
    with pytest.raises(ValueError, match="not Prometheus text format"):
        parse_server_state("\x00 {not prometheus\n")
    assert (
        parse_server_state("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running NaN\n").num_running
        is None
    )


def test_server_state_is_read_from_each_engines_metric_names():
    llama_cpp = (
        "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.25\n"
        "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\n"
        "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n"
    )
    sglang = (
        '# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name="m"} 0.5\n'
        '# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="m"} 4\n'
        '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="m"} 7\n'
    )
    old_vllm = (
        '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name="a"} 0.1\n'
        'vllm:gpu_cache_usage_perc{model_name="b"} 0.3\n'
    )
    assert (
        parse_server_state(llama_cpp).kv_usage,
        parse_server_state(llama_cpp).num_running,
        parse_server_state(llama_cpp).num_waiting,
    ) == (0.25, 3, 2)
    assert (
        parse_server_state(sglang).kv_usage,
        parse_server_state(sglang).num_running,
        parse_server_state(sglang).num_waiting,
    ) == (0.5, 7, 4)
    assert parse_server_state(old_vllm).kv_usage == 0.3 and parse_server_state(old_vllm).preemptions_total is None
    assert json.dumps(parse_server_state("").__dict__) == json.dumps(
        {key: None for key in parse_server_state("").__dict__}
    )


def test_each_metric_has_vllms_name_type_help_and_buckets():
    """What a vLLM dashboard reads: the families, their types and help texts, the histograms'
    buckets (vLLM's), and cache_config_info set to 1 with the capacity in its labels."""
    metrics = ServerMetrics("m", block_size=16, num_blocks=100)
    families = {
        family.name: family for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
    }
    assert {name: (family.type, family.documentation) for name, family in families.items()} == {
        "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
        "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
        "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
        "vllm:num_preemptions": ("counter", "Cumulative number of preemptions."),
        "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed."),
        "vllm:generation_tokens": ("counter", "Number of generation tokens processed."),
        "vllm:prefix_cache_queries": ("counter", "Prefix cache queries, in terms of number of queried tokens."),
        "vllm:prefix_cache_hits": ("counter", "Prefix cache hits, in terms of number of cached tokens."),
        "vllm:request_success": ("counter", "Count of successfully processed requests."),
        "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token in seconds."),
        "vllm:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency in seconds."),
        "vllm:e2e_request_latency_seconds": ("histogram", "Histogram of e2e request latency in seconds."),
        "vllm:request_queue_time_seconds": ("histogram", "Histogram of time spent in WAITING phase for request."),
        "vllm:cache_config_info": ("gauge", "Information of the LLMEngine CacheConfig"),
        "vllm:spec_decode_num_drafts": ("counter", "Number of spec decoding drafts."),
        "vllm:spec_decode_num_draft_tokens": ("counter", "Number of draft tokens."),
        "vllm:spec_decode_num_accepted_tokens": ("counter", "Number of accepted tokens."),
    }

    def buckets(name: str) -> list[float]:
        return [float(sample.labels["le"]) for sample in families[name].samples if sample.name.endswith("_bucket")][:-1]

    assert (
        buckets("vllm:time_to_first_token_seconds")[:3] == [0.001, 0.005, 0.01]
        and buckets("vllm:time_to_first_token_seconds")[-1] == 80.0
    )
    assert buckets("vllm:inter_token_latency_seconds")[:3] == [0.01, 0.025, 0.05]
    assert (
        buckets("vllm:e2e_request_latency_seconds")[:2] == [0.3, 0.5]
        and buckets("vllm:request_queue_time_seconds")[-1] == 480.0
    )
    (info,) = families["vllm:cache_config_info"].samples
    assert info.value == 1 and info.labels == {"block_size": "16", "num_gpu_blocks": "100"}


def test_a_partial_cache_config_and_the_parsers_own_words():
    state = parse_server_state('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16"} 1\n')
    assert (state.block_size, state.num_blocks) == (16, None)
    state = parse_server_state('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{num_gpu_blocks="12"} 1\n')
    assert (state.block_size, state.num_blocks) == (None, 12)
    with pytest.raises(ValueError) as error:
        parse_server_state("metric_without_value\n")
    assert str(error.value).startswith("not Prometheus text format (ValueError: ") and "metric_without_value" in str(
        error.value
    )
