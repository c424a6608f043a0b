"""Metric definitions: percentiles carry their n; TTFT, TPOT, ITL and e2e follow DESIGN.md."""

from __future__ import annotations

import pytest

from engine import RequestMetrics, percentiles
from engine.requests.sampling_params import SamplingParams
from tests.tiny_models import tiny_engine


def test_percentiles_report_n_and_skip_missing_values():
    result = percentiles([10.0, None, 20.0, 30.0, 40.0])
    assert result.n == 4 and result.mean == 25.0 and result.p50 == 25.0
    assert result.p99 == pytest.approx(39.7)
    assert "n=4" in str(result)
    assert percentiles([]).n == 0 and percentiles([]).p50 is None and str(percentiles([])) == "no values yet (n=0)"


def test_request_latencies_follow_their_definitions():
    metrics = RequestMetrics(arrival_time=1.0, num_prompt_tokens=5, first_scheduled_time=1.5)
    metrics.first_token_time = 2.0
    metrics.token_times = [2.0, 2.25, 2.75]
    assert metrics.queue_time_ms == 500.0
    assert metrics.ttft_ms == 1000.0
    assert metrics.e2e_ms == 1750.0
    assert metrics.tpot_ms == pytest.approx((1750.0 - 1000.0) / 2)
    assert metrics.itl_ms == [250.0, 500.0]
    single = RequestMetrics(arrival_time=0.0, num_prompt_tokens=1, token_times=[1.0])
    assert single.tpot_ms is None


def test_engine_fills_request_and_step_metrics_on_a_fake_clock(tiny_llama):
    directory, _ = tiny_llama
    ticks = iter(range(10_000))
    engine = tiny_engine(directory)
    engine.clock = lambda: float(next(ticks))
    request = engine.add_request(
        [1, 2, 3], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True), arrival_time=0.0
    )
    outputs = []
    durations, split = [], []
    while engine.has_unfinished():
        result = engine.step()
        durations.append(result.stats.step_duration_s)
        split.append((result.trace.execute_s, result.trace.other_s))
        outputs += [output for output in result.outputs if output.request_id == request]
    metrics = outputs[-1].metrics
    # Each step reads the clock four times: start (scheduled), around the executor, end (tokens are
    # stamped after the executor). add_request read tick 0; step 1 reads 1-4, step 2 5-8, step 3 9-12.
    assert durations == [3.0, 3.0, 3.0] and split == [(1.0, 2.0)] * 3
    assert [len(output.new_token_ids) for output in outputs] == [1, 1, 1]
    assert metrics.num_output_tokens == 3 and metrics.finish_reason == "length"
    assert metrics.token_times == [3.0, 7.0, 11.0] and metrics.finish_time == 11.0
    assert (metrics.queue_time_ms, metrics.ttft_ms, metrics.e2e_ms, metrics.tpot_ms) == (
        1000.0,
        3000.0,
        11000.0,
        4000.0,
    )
