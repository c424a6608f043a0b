"""A hand-built run log with known times, and the exact report it must give: every percentile,
rate, throughput and goodput, with its n. The requests cover each way a request can end:
several tokens, a single token, rejected, aborted, and still unfinished when the run ended."""

from __future__ import annotations

import dataclasses

import pytest
from scipy import stats

from workbench.analysis.report import build_report
from workbench.runs.run_log import RunLog


def request(request_id, tag, arrival, scheduled, token_times, reason, prompt_tokens, finish=None):
    return {
        "request_id": request_id,
        "tag": tag,
        "arrival_time": arrival,
        "num_prompt_tokens": prompt_tokens,
        "first_scheduled_time": scheduled,
        "first_token_time": token_times[0] if token_times else None,
        "finish_time": finish if finish is not None else (token_times[-1] if token_times else None),
        "token_times": token_times,
        "preemptions": 0,
        "finish_reason": reason,
        "finish_detail": "",
    }


def step(time_s, prefill, decode, used, preemptions=0):
    return {
        "time_s": time_s,
        "step_duration_s": 0.1,
        "prefill_tokens": prefill,
        "decode_tokens": decode,
        "num_seqs": 2,
        "kv_blocks_used": used,
        "kv_blocks_total": 100,
        "kv_blocks_cached_free": 0,
        "num_waiting": 0,
        "num_waiting_long": 0,
        "num_running": 2,
        "preemptions_total": preemptions,
        "rejections_total": 1,
        "prefix_cache_hit_tokens_total": 30,
        "prefix_cache_query_tokens_total": 120,
    }


REQUESTS = [
    # ttft 1000, e2e 3000, tpot 2000/3, itl 500 500 1000, queue 500: meets the TTFT SLO (1500 ms)
    request("a", "chat", 0.0, 0.5, [1.0, 1.5, 2.0, 3.0], "stop", 10),
    # a single token: ttft = e2e = 200, no tpot, no itl, queue 0; meets the SLO
    request("b", "chat", 1.0, 1.0, [1.2], "length", 20),
    # ttft 3000 (misses the SLO), e2e 4000, tpot 1000, itl 1000, queue 1000
    request("c", "long", 2.0, 3.0, [5.0, 6.0], "length", 100),
    request("d", "chat", 2.5, None, [], "rejected", 5000, finish=2.5),
    request("e", "chat", 3.0, 3.1, [3.5, 4.0], "abort", 8, finish=4.0),
    request("f", "chat", 9.0, None, [], "unfinished", 12),
]
LOG = RunLog(
    header={
        "start_time": 0.0,
        "scenario": {"name": "golden", "slo": {"ttft_ms": 1500, "tpot_ms": None, "e2e_ms": None}},
        "variant": None,
        "seed": 0,
        "versions": {},
        "engine": {},
        "requests_planned": 7,
    },
    steps=[
        step(1.0, 130, 0, 20),
        step(2.0, 0, 2, 40, preemptions=1),
        step(3.0, 0, 2, 10, preemptions=3),
        step(4.0, 10, 1, 30, preemptions=3),
    ],
    requests=REQUESTS,
    footer={"duration_s": 10.0, "stopped_early": True, "requests_unfinished": 1, "requests_not_sent": 1},
)


def metric(report, name):
    entry = report["metrics"][name]
    return entry["value"], entry["n"]


@pytest.mark.parametrize(
    "name, value, n",
    [
        ("ttft_mean_ms", 1400.0, 3),
        ("ttft_p50_ms", 1000.0, 3),
        ("ttft_p90_ms", 2600.0, 3),
        ("ttft_p99_ms", 2960.0, 3),
        ("e2e_mean_ms", 2400.0, 3),
        ("e2e_p50_ms", 3000.0, 3),
        ("e2e_p90_ms", 3800.0, 3),
        ("e2e_p99_ms", 3980.0, 3),
        ("tpot_mean_ms", 2500 / 3, 2),
        ("tpot_p50_ms", 2500 / 3, 2),
        ("tpot_p90_ms", 2000 / 3 + 0.9 * 1000 / 3, 2),
        ("itl_mean_ms", 750.0, 4),
        ("itl_p50_ms", 750.0, 4),
        ("itl_p90_ms", 1000.0, 4),
        ("itl_p99_ms", 1000.0, 4),
        ("queue_time_mean_ms", 500.0, 3),
        ("queue_time_p50_ms", 500.0, 3),
        ("queue_time_p90_ms", 900.0, 3),
        ("duration_s", 10.0, 4),
        ("request_throughput_req_s", 0.3, 3),  # 3 finished in 10 s
        ("output_tok_s", 0.9, 6),  # 4 + 1 + 2 + 2 (aborted) tokens in 10 s
        ("prompt_tok_s", 13.0, 3),  # 10 + 20 + 100 prompt tokens of finished requests
        ("prefill_tok_s", 14.0, 4),  # 140 prefilled tokens
        ("goodput_perc", 100 * 2 / 6, 6),  # 2 of the 6 that arrived: rejected, aborted, unfinished are misses
        ("goodput_req_s", 0.2, 6),
        ("requests_finished", 3, 6),
        ("requests_rejected", 1, 6),
        ("requests_aborted", 1, 6),
        ("requests_unfinished", 1, 6),
        ("requests_not_sent", 1, 7),
        ("preemptions", 3, 4),
        ("kv_usage_peak_perc", 40.0, 4),
        ("kv_usage_mean_perc", 25.0, 4),
        ("prefix_cache_hit_perc", 25.0, 120),
        ("steps_beside_compile", 0, 4),  # a log written before the field: no step ran beside a compile
        ("chat/ttft_p50_ms", 600.0, 2),
        ("chat/goodput_perc", 40.0, 5),
        ("long/ttft_p50_ms", 3000.0, 1),
        ("long/goodput_perc", 0.0, 1),
    ],
)
def test_the_golden_run_log_gives_exact_figures(name, value, n):
    assert metric(build_report(LOG), name) == (pytest.approx(value), n)


def test_steps_run_beside_the_compile_are_counted_and_the_requests_they_touched_named():
    steps = [{**step, "beside_compile": index < 2} for index, step in enumerate(LOG.steps)]
    report = build_report(dataclasses.replace(LOG, steps=steps))
    assert metric(report, "steps_beside_compile") == (2, 4)
    # Steps end at 1.0 and 2.0 s and last 0.1 s; a, b and c arrived by 2.0 s.
    assert report["beside_compile"] == (
        "2 of 4 steps (from 0.9 s to 2.0 s) ran eagerly beside the decode graph's compile: the latencies "
        "of the 3 of 6 requests that arrived by then measure the warm-up, not the compiled engine"
    )
    assert build_report(LOG)["beside_compile"] is None


def test_the_golden_run_is_incomplete_for_both_reasons_and_says_so():
    report = build_report(LOG)
    assert not report["complete"]
    assert report["incomplete_because"] == [
        "requests still in flight when the run ended: 1",
        "planned requests never sent: 1",
    ]
    assert report["metrics"]["requests_meeting_slo"] == {
        "value": 2,
        "unit": "requests meeting every SLO",
        "n": 6,
        "interval": None,
    }


def test_without_a_footer_the_requests_not_logged_count_as_not_sent():
    crashed = RunLog(LOG.header, LOG.steps, LOG.requests, footer=None)
    report = build_report(crashed)
    assert report["incomplete_because"][0] == "the run log was not closed (crash or interruption)"
    assert metric(report, "requests_not_sent") == (1, 7)
    assert metric(report, "duration_s") == (4.0, 4)  # up to the last logged step


UNITS = {
    "duration_s": "s",
    "request_throughput_req_s": "finished requests/s",
    "output_tok_s": "output tokens/s (all generated, see notes)",
    "prompt_tok_s": "prompt tokens of finished requests/s",
    "prefill_tok_s": "prefilled tokens/s (recomputes included)",
    "goodput_perc": "% of arrived requests meeting every SLO",
    "goodput_req_s": "requests meeting every SLO per second",
    "requests_finished": "requests",
    "requests_rejected": "requests",
    "requests_aborted": "requests",
    "requests_unfinished": "requests still waiting or running when the run ended",
    "requests_not_sent": "planned requests never sent",
    "preemptions": "events",
    "kv_usage_peak_perc": "% of KV blocks",
    "kv_usage_mean_perc": "% of KV blocks",
    "prefix_cache_hit_perc": "% of prompt tokens served from the prefix cache",
    "ttft_p50_ms": "ms",
    "tpot_p50_ms": "ms/token",
    "itl_p99_ms": "ms",
    "e2e_mean_ms": "ms",
    "queue_time_p90_ms": "ms",
}


def test_units_say_what_each_number_counts():
    metrics = build_report(LOG)["metrics"]
    assert {name: metrics[name]["unit"] for name in UNITS} == UNITS


def test_the_report_carries_its_identity_and_definitions():
    report = build_report(LOG)
    assert (
        report["schema"] == "workbench-report/4" and report["stopped_early"] is True and report["requests_planned"] == 7
    )
    assert report["slo"] == {"ttft_ms": 1500, "tpot_ms": None, "e2e_ms": None} and report["variant"] is None
    assert "finished requests (stop or length) only" in report["notes"]["latency"]
    assert "rejected, aborted, failed and unfinished ones count as misses" in report["notes"]["goodput"]


def test_a_log_cut_off_before_its_first_step_has_no_rates():
    header = {**LOG.header, "start_time": 100.0, "requests_planned": 2}
    report = build_report(RunLog(header, [], [], footer=None))
    assert metric(report, "duration_s") == (0.0, 0)
    assert metric(report, "output_tok_s") == (None, 0) and metric(report, "goodput_req_s") == (None, 0)
    assert metric(report, "preemptions") == (0, 0) and metric(report, "kv_usage_peak_perc") == (None, 0)
    assert metric(report, "prefix_cache_hit_perc") == (None, 0) and metric(report, "requests_not_sent") == (2, 2)


def test_duration_counts_from_the_start_time_and_old_footers_mean_nothing_unsent():
    steps = [step(101.0, 10, 0, 5), step(104.0, 0, 1, 5)]
    header = {**LOG.header, "start_time": 100.0, "requests_planned": 1}
    finished = [request("a", "chat", 100.0, 100.5, [101.0, 102.0], "stop", 4)]
    crashed = build_report(RunLog(header, steps, finished, footer=None))
    assert metric(crashed, "duration_s") == (4.0, 2) and metric(crashed, "requests_not_sent") == (0, 1)
    old_footer = build_report(RunLog(header, steps, finished, footer={"duration_s": 5.0, "stopped_early": False}))
    assert (
        old_footer["complete"]
        and old_footer["incomplete_because"] == []
        and metric(old_footer, "requests_not_sent") == (0, 1)
    )
    assert metric(old_footer, "output_tok_s") == (0.4, 1)  # 2 tokens in the footer's 5 s


def test_the_files_written_hold_the_report_and_every_request_and_step(tmp_path):
    import csv
    import json

    from workbench.analysis.report import write_report_files

    report = write_report_files(LOG, tmp_path / "out")
    assert (
        json.loads((tmp_path / "out" / "report.json").read_text())
        == json.loads(json.dumps(report))
        == json.loads(json.dumps(build_report(LOG)))
    )
    with (tmp_path / "out" / "requests.csv").open() as handle:
        rows = {row["request_id"]: row for row in csv.DictReader(handle)}
    assert list(rows) == ["a", "b", "c", "d", "e", "f"]
    assert (rows["a"]["tag"], rows["a"]["finish_reason"], json.loads(rows["a"]["token_times"])) == (
        "chat",
        "stop",
        [1.0, 1.5, 2.0, 3.0],
    )
    assert (float(rows["a"]["queue_time_ms"]), float(rows["a"]["ttft_ms"]), float(rows["a"]["e2e_ms"])) == (
        500.0,
        1000.0,
        3000.0,
    )
    assert float(rows["c"]["tpot_ms"]) == 1000.0 and rows["b"]["tpot_ms"] == "" and rows["d"]["ttft_ms"] == ""
    with (tmp_path / "out" / "steps.csv").open() as handle:
        steps = list(csv.DictReader(handle))
    assert [float(step["time_since_start_s"]) for step in steps] == [1.0, 2.0, 3.0, 4.0]
    assert [int(step["kv_blocks_used"]) for step in steps] == [20, 40, 10, 30] and steps[0]["prefill_tokens"] == "130"


def test_identity_offsets_and_short_runs_in_the_report_and_its_files(tmp_path):
    import csv

    from workbench.analysis.report import write_report_files

    header = {**LOG.header, "start_time": 100.0, "variant": "v1", "engine": {"kv_blocks": 7}, "requests_planned": 3}
    steps = [step(100.25, 10, 0, 5), step(100.5, 0, 1, 5)]
    finished = [request("a", "chat", 100.0, 100.1, [100.2, 100.3], "stop", 4)]
    log = RunLog(
        header,
        steps,
        finished,
        footer={"duration_s": 0.5, "stopped_early": False, "requests_unfinished": 0, "requests_not_sent": 0},
    )
    report = write_report_files(log, tmp_path / "nested" / "run")  # folders are created as needed
    assert report["variant"] == "v1" and report["engine"] == {"kv_blocks": 7}
    assert metric(report, "requests_not_sent") == (0, 3)  # the footer's count, not planned minus logged
    assert metric(report, "goodput_req_s") == (2.0, 1)  # 1 request in half a second
    with (tmp_path / "nested" / "run" / "steps.csv").open() as handle:
        assert [float(row["time_since_start_s"]) for row in csv.DictReader(handle)] == [0.25, 0.5]


def test_failed_requests_and_a_count_known_only_at_the_end():
    """A remote backend's failed request is counted and misses goodput; traffic that ended by a
    duration logs requests_planned null, filled in from the footer (or unknown without one)."""
    header = {**LOG.header, "start_time": 0.0, "requests_planned": None}
    requests = [
        request("a", "chat", 0.0, 0.1, [0.2, 0.3], "stop", 4),
        request("b", "chat", 0.0, None, [], "error", 4, finish=0.5),
    ]
    footer = {"duration_s": 1.0, "stopped_early": False, "requests_unfinished": 0, "requests_not_sent": 3}
    complete = build_report(RunLog(header, [step(0.5, 8, 1, 2)], requests, footer=footer))
    assert metric(complete, "requests_failed") == (1, 2) and metric(complete, "requests_finished") == (1, 2)
    assert complete["metrics"]["requests_failed"]["unit"] == "requests the server or the network failed"
    assert complete["requests_planned"] == 5 and metric(complete, "requests_not_sent") == (3, 5)
    assert metric(complete, "goodput_perc")[0] == 50.0  # a counts, b is a miss
    crashed = build_report(RunLog(header, [step(0.5, 8, 1, 2)], requests, footer=None))
    assert crashed["requests_planned"] is None and metric(crashed, "requests_not_sent") == (None, None)


def test_what_a_backend_does_not_expose_is_said_not_zeroed():
    header = {**LOG.header, "backend": {"name": "http://server (m)", "not_exposed": ["kv_cache", "prefix_cache"]}}
    report = build_report(RunLog(header, LOG.steps, LOG.requests, LOG.footer))
    for name in ("kv_usage_peak_perc", "kv_usage_mean_perc", "prefix_cache_hit_perc"):
        assert report["metrics"][name] == {
            "value": None,
            "unit": "not exposed by this backend",
            "n": 0,
            "interval": None,
        }
    assert metric(report, "preemptions") == (3, 4)  # exposed: as in the local report
    assert report["backend"] == {"name": "http://server (m)", "not_exposed": ["kv_cache", "prefix_cache"]}
    # A run log from before backends existed is the in-process engine's, everything exposed.
    assert build_report(LOG)["backend"] == {"name": "in-process engine", "not_exposed": []}


def test_the_golden_goodput_carries_clopper_pearsons_interval_worked_by_hand():
    # 2 of 6: the 2.5% quantile of Beta(2, 5) and the 97.5% quantile of Beta(3, 4).
    interval = build_report(LOG)["metrics"]["goodput_perc"]["interval"]
    assert (interval["low"], interval["high"]) == (
        pytest.approx(100 * stats.beta.ppf(0.025, 2, 5)),
        pytest.approx(100 * stats.beta.ppf(0.975, 3, 4)),
    )
    assert (round(interval["low"], 2), round(interval["high"], 2)) == (4.33, 77.72)
    assert interval["method"] == "Clopper-Pearson (exact binomial), n=6"


def test_latency_percentiles_of_three_requests_say_they_cannot_be_bounded_and_itl_has_none():
    metrics = build_report(LOG)["metrics"]
    ttft = metrics["ttft_p50_ms"]
    # 0.5^3 = 12.5% > 2.5%: neither the fastest nor the slowest of 3 bounds the median at 95%.
    assert (ttft["interval"]["low"], ttft["interval"]["high"]) == (None, None)
    assert ttft["interval"]["method"] == (
        "order statistics (distribution-free), 95.0%, n=3; lower and upper bound not identified: p50 of 3 requests; "
        "about 6 would bound it"
    )
    assert ttft["pair_interval"]["method"].startswith("order statistics (distribution-free), 97.5%, n=3")
    assert metrics["ttft_mean_ms"]["interval"] is None  # a mean of skewed latencies: no shown coverage
    assert metrics["itl_p50_ms"]["interval"] is None
    assert metrics["long/ttft_p50_ms"]["interval"]["low"] is None  # one request


def test_the_engines_memory_is_in_the_report_in_mib_and_a_server_without_it_has_none():
    engine = {"kv_blocks": 7, "weight_bytes": 3 * 2**20, "kv_cache_bytes": 2**19, "kv_capacity_tokens": 112}
    metrics = build_report(RunLog({**LOG.header, "engine": engine}, LOG.steps, LOG.requests, LOG.footer))["metrics"]
    assert metric({"metrics": metrics}, "memory/weights_mib") == (3.0, 1)
    assert metric({"metrics": metrics}, "memory/kv_cache_mib") == (0.5, 1)
    assert metrics["memory/kv_capacity_tokens"]["unit"] == "tokens the KV cache holds"
    interval = metrics["memory/weights_mib"]["interval"]
    assert interval["low"] == interval["high"] == 3.0 and interval["method"].startswith("deterministic")
    assert not [name for name in build_report(LOG)["metrics"] if name.startswith("memory/")]  # LOG's engine says none


def test_requests_that_ended_before_their_max_tokens_are_counted_by_why():
    """Issue 49 #1: the log keeps each request's plan, so the report can say "asked for N, got M"."""
    planned_max = {"a": 8, "b": 1, "c": 2, "d": 16, "e": 16, "f": 4}
    details = {"a": "end-of-sequence token", "b": "max_tokens (1)", "c": "max_tokens (2)"}
    requests = [
        {
            **record,
            "finish_detail": details.get(record["request_id"], ""),
            "planned": {
                "prompt_tokens": record["num_prompt_tokens"],
                "max_tokens": planned_max[record["request_id"]],
                "source": "synthetic",
                "session": None,
                "clipped": False,
            },
        }
        for record in REQUESTS
    ]
    report = build_report(dataclasses.replace(LOG, requests=requests))
    # a: 4 of 8 (end-of-sequence); b and c: all they asked for; d rejected, e aborted, f unfinished
    assert metric(report, "requests_ended_early") == (4, 6)
    assert report["ended_early_by_reason"] == {
        "abort": 1,
        "rejected": 1,
        "stop: end-of-sequence token": 1,
        "unfinished": 1,
    }
    # The typed cause counts, whatever the detail's words (issue 60 #2: they were parsed).
    typed = [
        {**record, "stop_cause": "stop string", "finish_detail": "matched"} if record["request_id"] == "a" else record
        for record in requests
    ]
    assert "stop: stop string" in build_report(dataclasses.replace(LOG, requests=typed))["ended_early_by_reason"]
    old = build_report(LOG)  # a log written before plans were kept
    assert metric(old, "requests_ended_early") == (None, 0) and old["ended_early_by_reason"] is None
