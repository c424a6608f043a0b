"""Arrival processes, length distributions, prompts and trace replay: seeded and measurable."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from engine import ConfigError
from engine.loading.sharegpt import load_sharegpt
from workbench.traffic.planned_traffic import PlannedTraffic, arrival_times
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.prompts import PromptMaker
from workbench.traffic.request_trace import read_trace_rows


def gaps(profile, seed=0, changes=()):
    return np.diff([0.0, *arrival_times(profile, np.random.default_rng(seed), list(changes))])


def plan_traffic(profile, maker, seed, max_model_len, rate_changes=()):
    """Every request of the profile, drawn in arrival order."""
    traffic = PlannedTraffic(profile, maker, seed, max_model_len, rate_changes)
    return [traffic.next_request(arrival) for arrival in traffic.arrivals]


def test_poisson_mean_rate_matches_the_setting():
    observed = gaps(TrafficProfile(arrival="poisson", rate=5.0, num_requests=20_000))
    assert 1 / observed.mean() == pytest.approx(5.0, rel=0.03)
    assert observed.std() / observed.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV 1


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_coefficient_of_variation_is_one_over_sqrt_burstiness(burstiness):
    observed = gaps(TrafficProfile(arrival="gamma", rate=3.0, burstiness=burstiness, num_requests=20_000))
    assert 1 / observed.mean() == pytest.approx(3.0, rel=0.05)
    assert observed.std() / observed.mean() == pytest.approx(1 / burstiness**0.5, rel=0.06)


def test_constant_rate_is_evenly_spaced():
    assert np.allclose(gaps(TrafficProfile(arrival="constant", rate=4.0, num_requests=10)), 0.25)


def test_ramp_rises_from_rate_to_end_rate():
    times = np.array(
        list(
            arrival_times(
                TrafficProfile(arrival="ramp", rate=1.0, end_rate=9.0, duration_s=200, num_requests=0),
                np.random.default_rng(1),
            )
        )
    )
    first, second = np.sum(times < 100), np.sum(times >= 100)
    # Expected counts: integral of the rate over each half = 300 and 700.
    assert first == pytest.approx(300, rel=0.15) and second == pytest.approx(700, rel=0.15)


def test_a_set_rate_event_changes_the_pace_from_then_on():
    times = np.array(
        list(
            arrival_times(
                TrafficProfile(arrival="poisson", rate=2.0, duration_s=400, num_requests=0),
                np.random.default_rng(2),
                [(200.0, 8.0)],
            )
        )
    )
    assert np.sum(times < 200) == pytest.approx(400, rel=0.15)
    assert np.sum(times >= 200) == pytest.approx(1600, rel=0.1)


def test_same_seed_same_schedule_byte_for_byte():
    maker = PromptMaker(None, vocab_size=1000)
    profile = TrafficProfile(
        arrival="gamma",
        burstiness=0.5,
        num_requests=50,
        prompt_len=LengthDistribution(kind="lognormal", mean=40, std=0.6),
        output_len=LengthDistribution(kind="uniform", low=4, high=20),
    )

    def schedule(seed):
        planned = plan_traffic(profile, maker, seed, max_model_len=512)
        return json.dumps(
            [[request.arrival_s, list(request.prompt_token_ids), request.max_tokens] for request in planned]
        )

    assert schedule(7) == schedule(7)
    assert schedule(7) != schedule(8)


@pytest.mark.parametrize(
    "distribution, mean",
    [
        (LengthDistribution(kind="fixed", mean=50), 50),
        (LengthDistribution(kind="uniform", low=10, high=30), 20),
        (LengthDistribution(kind="normal", mean=100, std=10), 100),
        (LengthDistribution(kind="lognormal", mean=100, std=0.5), 100),
    ],
)
def test_length_distributions_have_their_mean(distribution, mean):
    rng = np.random.default_rng(0)
    samples = [distribution.sample(rng, limit=10_000) for _ in range(5000)]
    assert np.mean(samples) == pytest.approx(mean, rel=0.03)


def test_lengths_past_the_context_are_cut_to_it_and_the_plan_says_so():
    """Lengths are drawn as the settings say; fit_to_context cuts them to the model's context, and
    only the requests it cut are marked `clipped` (the run log keeps the mark)."""
    wide = LengthDistribution(kind="lognormal", mean=300, std=1.5)
    profile = TrafficProfile(arrival="constant", rate=10, num_requests=400, prompt_len=wide, output_len=wide)
    planned = plan_traffic(profile, PromptMaker(None, 100), 0, max_model_len=600)
    lengths = [(len(request.prompt_token_ids), request.max_tokens, request.clipped) for request in planned]
    assert all(prompt + output <= 599 and output >= 1 for prompt, output, _ in lengths)
    assert max(prompt for prompt, _, _ in lengths) == 598
    at_the_edge = [prompt == 598 or prompt + output == 599 for prompt, output, _ in lengths]
    assert [clipped for _, _, clipped in lengths] == at_the_edge and 0 < sum(at_the_edge) < 400
    assert planned[0].record() == {
        "prompt_tokens": lengths[0][0],
        "max_tokens": lengths[0][1],
        "source": "synthetic",
        "session": None,
        "clipped": lengths[0][2],
    }


def test_bad_traffic_settings_are_named():
    with pytest.raises(ConfigError, match="arrival: expected one of poisson, gamma"):
        TrafficProfile(arrival="bursty")
    with pytest.raises(ConfigError, match="num_requests, duration_s: set at least one"):
        TrafficProfile(num_requests=0, duration_s=0)
    with pytest.raises(ConfigError, match="high: a uniform length needs an upper bound"):
        LengthDistribution(kind="uniform")


@pytest.mark.slow
def test_synthetic_prompts_are_real_text_of_the_requested_length(smollm_source):
    maker = PromptMaker(smollm_source.tokenizer, smollm_source.config.vocab_size)
    ids = maker.synthetic(200, np.random.default_rng(3))
    text = smollm_source.tokenizer.decode(ids)
    assert len(ids) == 200
    letters = sum(character.isalpha() or character.isspace() for character in text)
    assert letters / len(text) > 0.8  # words, not random token soup
    assert len(text.split()) > 80


def test_sharegpt_reads_complete_records_only():
    data = load_sharegpt()
    assert 17_000 < data.num_complete_records < 18_000  # the file is cut off after ~17,700 records
    assert len(data.conversations) > 0.9 * data.num_complete_records
    assert all(conversation.prompt and conversation.reply for conversation in data.conversations[:100])


@pytest.mark.slow
def test_sharegpt_prompts_carry_their_reference_reply_length(smollm_source):
    maker = PromptMaker(smollm_source.tokenizer, smollm_source.config.vocab_size)
    profile = TrafficProfile(prompts="sharegpt", num_requests=5)
    planned = plan_traffic(profile, maker, 0, max_model_len=8192)
    assert len(planned) == 5 and all(request.max_tokens >= 1 for request in planned)
    assert len({request.max_tokens for request in planned}) > 1


def trace_plan(tmp_path, text, suffix=".csv", max_model_len=64, maker=None, **settings):
    trace = tmp_path / f"trace{suffix}"
    trace.write_text(text)
    profile = TrafficProfile(prompts="trace", trace_file=str(trace), **{"num_requests": 0, **settings})
    traffic = PlannedTraffic(profile, maker or PromptMaker(None, vocab_size=100), 0, max_model_len)
    planned = [traffic.next_request(arrival) for arrival in traffic.arrivals]
    return [(request.arrival_s, len(request.prompt_token_ids), request.max_tokens) for request in planned], traffic


def test_trace_replay_from_csv_and_jsonl(tmp_path):
    planned, _ = trace_plan(tmp_path, "arrival_s,prompt_tokens,output_tokens\n0.5,12,4\n0.1,30,8\n")
    assert planned == [(0.1, 30, 8), (0.5, 12, 4)]
    jsonl = (
        '{"arrival_s": 0.25, "prompt_tokens": 7, "output_tokens": 3}\n\n'
        '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2, "tag": "own"}\n'
    )
    planned, traffic = trace_plan(tmp_path, jsonl, ".jsonl", tag="replayed")
    assert planned == [(0.0, 5, 2), (0.25, 7, 3)]
    tagged = PlannedTraffic(traffic.profile, PromptMaker(None, vocab_size=100), 0, 64)
    # A row's own tag wins over the traffic's.
    assert [tagged.next_request(arrival).tag for arrival in tagged.arrivals] == ["own", "replayed"]


def test_vidurs_columns_are_read_as_the_azure_trace_ships_them(tmp_path):
    planned, _ = trace_plan(
        tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n4.314579,396,109\n", max_model_len=8192
    )
    assert planned == [(0.0, 374, 44), (4.314579, 396, 109)]


VIDUR_ROWS = "arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(
    f"{second}.0,{10 + second},{2 + second}\n" for second in range(10)
)


def test_a_window_of_the_trace_is_rebased_scaled_and_cut(tmp_path):
    # From trace second 4 on, ten times as slow: rows 4..9 arrive at 0, 10, ... 50 run seconds.
    planned, _ = trace_plan(tmp_path, VIDUR_ROWS, trace_start_s=4, time_scale=10)
    assert planned == [(10.0 * k, 14 + k, 6 + k) for k in range(6)]
    # duration_s counts run seconds (after scaling); num_requests takes the first N after that.
    planned, _ = trace_plan(tmp_path, VIDUR_ROWS, trace_start_s=4, time_scale=10, duration_s=25)
    assert [arrival for arrival, _, _ in planned] == [0.0, 10.0, 20.0]
    planned, _ = trace_plan(tmp_path, VIDUR_ROWS, time_scale=0.5, num_requests=3)
    assert [arrival for arrival, _, _ in planned] == [0.0, 0.5, 1.0]


def test_lengths_beyond_the_context_are_cut_and_counted(tmp_path):
    rows = "arrival_s,prompt_tokens,output_tokens\n0,10,4\n1,100,4\n2,30,40\n3,61,1\n"
    planned, traffic = trace_plan(tmp_path, rows, max_model_len=64)
    # 100 prompt tokens leave room for one output token; 30 + 40 is cut to 30 + 33; 61 + 1 fits.
    assert planned == [(0.0, 10, 4), (1.0, 62, 1), (2.0, 30, 33), (3.0, 61, 1)]
    assert traffic.trace_summary == {
        "file": str(tmp_path / "trace.csv"),
        "rows_in_file": 4,
        "requests": 4,
        "clipped": 2,
        "max_model_len": 64,
    }


@pytest.mark.parametrize(
    "content, suffix, message",
    [
        (None, ".csv", "trace file not found"),
        ("{not json\n", ".jsonl", r"trace.jsonl:1: not valid JSON"),
        ("[1, 2]\n", ".jsonl", r"trace.jsonl:1: expected a JSON object"),
        ("arrival_s,prompt_tokens,output_tokens\n", ".txt", r"trace.txt: expected a .csv or .jsonl trace"),
        ("arrival_s,prompt_tokens,output_tokens\n", ".csv", r"trace.csv: the trace has no requests"),
        (
            '{"arrival_s": 0, "prompt": "hello", "output_tokens": 2}\n',
            ".jsonl",
            r"trace.jsonl:1: a text prompt needs a model with a tokenizer",
        ),
        (
            '{"arrival_s": -1, "prompt_tokens": 3, "output_tokens": 2}\n',
            ".jsonl",
            r"trace.jsonl:1: column 'arrival_s': expected seconds >= 0, got -1",
        ),
        (
            '{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 0}\n',
            ".jsonl",
            r"trace.jsonl:1: column 'output_tokens': expected at least 1 output token, got 0",
        ),
        ("arrival_s,output_tokens\n0,2\n", ".csv", r"trace.csv:2: missing column 'prompt_tokens'"),
        (
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,12,4\nsoon,3,4\n",
            ".csv",
            r"trace.csv:3: column 'arrived_at': expected a number, got 'soon'",
        ),
        (
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,12.5,4\n",
            ".csv",
            r"trace.csv:2: column 'num_prefill_tokens': expected a whole number, got '12.5'",
        ),
        ("arrival_s,prompt_tokens,output_tokens\n0,3,nan\n", ".csv", r"column 'output_tokens': expected a whole"),
        # As spreadsheets export: UTF-16, or Latin-1 (a traceback before).
        ("arrival_s,prompt_tokens,output_tokens\n0,3,2\n".encode("utf-16"), ".csv", r"trace.csv: not UTF-8 \(line 1\)"),
        ("arrival_s,prompt,output_tokens\n0,hi,2\n1,café,2\n".encode("latin-1"), ".csv", r"not UTF-8 \(line 3\)"),
        ("arrival_s,prompt_tokens,output_tokens\n0,3,2,9\n", ".csv", r"trace.csv:2: 1 more field\(s\) than the header"),
        (
            '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 2}\n',
            ".jsonl",
            r"trace.jsonl:1: column 'prompt_tokens': expected a whole number, got True",
        ),
    ],
)
def test_every_bad_trace_names_what_is_wrong(tmp_path, content, suffix, message):
    trace = tmp_path / f"trace{suffix}"
    if isinstance(content, bytes):
        trace.write_bytes(content)
    elif content is not None:
        trace.write_text(content)
    profile = TrafficProfile(prompts="trace", trace_file=str(trace))
    with pytest.raises(ConfigError, match=message):
        PlannedTraffic(profile, PromptMaker(None, vocab_size=100), 0, max_model_len=64)


def test_a_utf8_trace_with_a_byte_order_mark_reads_as_without(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("\ufeffarrival_s,prompt_tokens,output_tokens\n0,3,2\n", encoding="utf-8")
    (row,) = read_trace_rows(trace)
    assert (row.arrival_s, row.prompt_tokens, row.output_tokens) == (0.0, 3, 2)


def test_a_trace_of_absolute_timestamps_is_refused_naming_where_to_start(tmp_path):
    """A production log's epoch seconds sat at "requests: 0" for ever; the refusal names the
    trace_start_s that replays from its first request, and that setting replays it."""
    rows = "arrival_s,prompt_tokens,output_tokens\n1733011200.0,5,2\n1733011200.5,6,2\n1733011202.0,7,2\n"
    with pytest.raises(ConfigError, match=r"arrives 1733011200 s into the trace.*trace_start_s = 1733011200 to"):
        trace_plan(tmp_path, rows)
    planned, _ = trace_plan(tmp_path, rows, trace_start_s=1733011200)
    assert planned == [(0.0, 5, 2), (0.5, 6, 2), (2.0, 7, 2)]
    planned, _ = trace_plan(tmp_path, "arrival_s,prompt_tokens,output_tokens\n86400,5,2\n")  # a day's quiet is kept
    assert planned == [(86400.0, 5, 2)]


def test_a_later_row_more_than_a_day_after_the_one_before_is_refused(tmp_path):
    """Issue 58 #10: a row 1e300 s after the others ran "complete" at 0 tok/s on a simulated
    engine and waited for ever on a server. The refusal names the lines and the duration_s that
    ends the replay before the gap; a day of quiet is kept, and a faster time_scale keeps more."""
    rows = "arrival_s,prompt_tokens,output_tokens\n0,5,2\n1,6,2\n1e300,7,2\n"
    with pytest.raises(ConfigError, match=r"line 4 arrives 1e\+300 run seconds after line 3.*duration_s = 1 to end"):
        trace_plan(tmp_path, rows)
    planned, _ = trace_plan(tmp_path, rows, duration_s=1)
    assert planned == [(0.0, 5, 2), (1.0, 6, 2)]
    day_apart = "arrival_s,prompt_tokens,output_tokens\n0,5,2\n86401,6,2\n"
    with pytest.raises(ConfigError, match="line 3 arrives 86,401 run seconds after line 2"):
        trace_plan(tmp_path, day_apart)
    planned, _ = trace_plan(tmp_path, day_apart, time_scale=0.5)
    assert planned == [(0.0, 5, 2), (43200.5, 6, 2)]


def test_an_empty_window_says_where_the_trace_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"no request in the window \(trace_start_s = 20.*run from 0 to 9 s"):
        trace_plan(tmp_path, VIDUR_ROWS, trace_start_s=20)
    with pytest.raises(ConfigError, match=r"time_scale > 0"):
        TrafficProfile(prompts="trace", trace_file="x.csv", time_scale=0)


def test_a_shared_prefix_starts_every_synthetic_prompt():
    profile = TrafficProfile(num_requests=5, shared_prefix_tokens=20, prompt_len=LengthDistribution(mean=10))
    planned = plan_traffic(profile, PromptMaker(None, vocab_size=100), 3, max_model_len=64)
    prefixes = {request.prompt_token_ids[:20] for request in planned}
    assert len(prefixes) == 1 and all(len(request.prompt_token_ids) == 30 for request in planned)
    assert len({request.prompt_token_ids[20:] for request in planned}) == 5  # the rest differs
    # The longest prefix that leaves a prompt token and an output token within 64 tokens is 61.
    plan_traffic(TrafficProfile(num_requests=1, shared_prefix_tokens=61), PromptMaker(None, 100), 0, 64)


def test_planned_traffic_follows_rate_changes_and_needs_a_count_for_closed_loop():
    profile = TrafficProfile(arrival="constant", rate=10.0, num_requests=6, prompt_len=LengthDistribution(mean=4))
    planned = plan_traffic(profile, PromptMaker(None, 100), 0, 64, rate_changes=[(0.25, 1.0)])
    assert [request.arrival_s for request in planned] == pytest.approx([0.1, 0.2, 0.3, 1.3, 2.3, 3.3])
    with pytest.raises(ConfigError, match="^num_requests: closed_loop traffic needs a number of requests$"):
        plan_traffic(
            TrafficProfile(arrival="closed_loop", num_requests=0, duration_s=5.0), PromptMaker(None, 100), 0, 64
        )


class FixedConversations(PromptMaker):
    """A prompt maker whose ShareGPT conversations are given (the real set needs the tokenizer)."""

    def __init__(self, conversations):
        super().__init__(None, vocab_size=100)
        self.conversations = iter(conversations)

    def sharegpt(self, rng):
        prompt_len, reply_len = next(self.conversations)
        return list(range(prompt_len)), reply_len, ({"role": "user", "content": f"{prompt_len} tokens"},)


def test_sharegpt_prompts_are_cut_to_leave_room_for_their_reply():
    profile = TrafficProfile(prompts="sharegpt", num_requests=3)
    maker = FixedConversations([(5, 8), (5, 100), (30, 50)])
    planned = plan_traffic(profile, maker, 0, max_model_len=20)
    # (prompt, output): as given; the reply cut to the context; the prompt cut to 18 and one output token.
    assert [(len(request.prompt_token_ids), request.max_tokens) for request in planned] == [(5, 8), (5, 14), (18, 1)]
    # A cut prompt is no longer the chat it was templated from: it is sent as tokens, not as the chat.
    assert [request.messages is not None for request in planned] == [True, True, False]
    assert [request.clipped for request in planned] == [False, True, True]


def test_sharegpt_reply_lengths_are_clipped_to_the_output_length_bounds():
    profile = TrafficProfile(prompts="sharegpt", num_requests=3, output_len=LengthDistribution(low=4, high=32))
    planned = plan_traffic(profile, FixedConversations([(5, 2), (5, 20), (5, 500)]), 0, max_model_len=2048)
    assert [request.max_tokens for request in planned] == [4, 20, 32]


def test_synthetic_lengths_are_clipped_to_the_context_around_the_shared_prefix():
    profile = TrafficProfile(
        num_requests=2,
        shared_prefix_tokens=10,
        prompt_len=LengthDistribution(mean=1000),
        output_len=LengthDistribution(mean=1000),
    )
    planned = plan_traffic(profile, PromptMaker(None, 100), 0, max_model_len=64)
    # prefix 10 + at most 64 - 10 - 2 = 52 prompt tokens, then the one output token that still fits
    assert [(len(request.prompt_token_ids), request.max_tokens) for request in planned] == [(62, 1), (62, 1)]
    assert all(request.clipped for request in planned)
    short = TrafficProfile(
        num_requests=1, prompt_len=LengthDistribution(mean=20), output_len=LengthDistribution(mean=1000)
    )
    (request,) = plan_traffic(short, PromptMaker(None, 100), 0, max_model_len=64)
    assert (len(request.prompt_token_ids), request.max_tokens) == (20, 43)  # 64 - 20 - 1


LENGTH_EXPECTED = "expected mean >= 1, std >= 0, low >= 1 and high 0 or >= low"


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(kind="gaussian"), "kind: expected one of fixed, uniform, normal, lognormal, got 'gaussian'"),
        (dict(mean=0.5), LENGTH_EXPECTED),
        (dict(std=-0.1), LENGTH_EXPECTED),
        (dict(low=0), LENGTH_EXPECTED),
        (dict(low=5, high=4), LENGTH_EXPECTED),
        (dict(kind="uniform"), "high: a uniform length needs an upper bound"),
    ],
)
def test_each_bad_length_setting_alone_is_refused(settings, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        LengthDistribution(**settings)


def test_length_settings_at_their_limits_are_accepted_and_kept():
    assert LengthDistribution(mean=1, std=0, low=1, high=1).sample(np.random.default_rng(0), limit=10) == 1
    rng = np.random.default_rng(0)
    uniform = [LengthDistribution(kind="uniform", low=2, high=4).sample(rng, limit=100) for _ in range(300)]
    assert set(uniform) == {2, 3, 4}  # both ends included, nothing beyond
    normal = [LengthDistribution(kind="normal", mean=100, std=30).sample(rng, limit=1000) for _ in range(2000)]
    assert 25 < np.std(normal) < 35 and 95 < np.mean(normal) < 105


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            dict(prompts="reddit"),
            "prompts: expected one of synthetic, sharegpt, copying, trace, sessions, got 'reddit'",
        ),
        (dict(rate=0.0), "rate: expected a positive number of requests/s, got 0.0"),
        (
            dict(arrival="ramp", end_rate=0.0, duration_s=5.0),
            "end_rate, duration_s: a ramp needs a positive end_rate and duration_s",
        ),
        (
            dict(arrival="ramp", end_rate=5.0, duration_s=0.0),
            "end_rate, duration_s: a ramp needs a positive end_rate and duration_s",
        ),
        (dict(burstiness=0.0), "burstiness: expected > 0, got 0.0"),
        (dict(concurrency=0), "concurrency: expected at least 1, got 0"),
        (dict(num_requests=-1), "num_requests, duration_s, shared_prefix_tokens: expected values >= 0"),
        (dict(duration_s=-1.0), "num_requests, duration_s, shared_prefix_tokens: expected values >= 0"),
        (dict(shared_prefix_tokens=-1), "num_requests, duration_s, shared_prefix_tokens: expected values >= 0"),
        (dict(prompts="trace"), "trace_file: prompts = 'trace' needs a trace file"),
    ],
)
def test_each_bad_traffic_setting_alone_is_refused(settings, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        TrafficProfile(**settings)


def test_traffic_settings_at_their_limits_are_accepted():
    TrafficProfile(arrival="closed_loop", rate=0.0, concurrency=1)
    ramp = TrafficProfile(arrival="ramp", rate=2.0, end_rate=0.5, duration_s=0.5)
    assert ramp.rate_at(0.25) == pytest.approx(1.25) and ramp.rate_at(1.0) == 0.5  # the end rate holds after the ramp
    TrafficProfile(burstiness=0.01, num_requests=0, duration_s=1.0, shared_prefix_tokens=0)


def test_a_zero_rate_pauses_arrivals_until_the_next_change_and_duration_includes_its_end():
    profile = TrafficProfile(arrival="constant", rate=10.0, num_requests=6)
    assert list(arrival_times(profile, np.random.default_rng(0), [(0.35, 0.0), (1.0, 10.0)])) == pytest.approx(
        [0.1, 0.2, 0.3, 0.4, 1.1, 1.2]
    )
    assert list(
        arrival_times(
            TrafficProfile(arrival="constant", rate=10.0, num_requests=6), np.random.default_rng(0), [(0.35, 0.0)]
        )
    ) == pytest.approx([0.1, 0.2, 0.3, 0.4])  # paused for good
    timed = TrafficProfile(arrival="constant", rate=4.0, num_requests=0, duration_s=0.5)
    assert list(arrival_times(timed, np.random.default_rng(0))) == [0.25, 0.5]  # an arrival exactly at the end counts


class CharacterTokenizer:
    def encode(self, text: str) -> list[int]:
        return [ord(character) % 100 for character in text]


def test_text_prompts_and_one_token_outputs_in_a_trace(tmp_path):
    maker = PromptMaker(None, vocab_size=100)
    maker.tokenizer = CharacterTokenizer()
    rows = "arrival_s,prompt,output_tokens\n0,hello,1\n1,a prompt longer than the context,4\n"
    trace = tmp_path / "trace.csv"
    trace.write_text(rows)
    traffic = PlannedTraffic(TrafficProfile(prompts="trace", trace_file=str(trace)), maker, 0, max_model_len=12)
    first, second = [traffic.next_request(arrival) for arrival in traffic.arrivals]
    assert first.prompt_token_ids == tuple(CharacterTokenizer().encode("hello")) and first.max_tokens == 1
    # A text prompt is cut to the context like a length: its first 10 tokens and one output token.
    assert second.prompt_token_ids == tuple(CharacterTokenizer().encode("a prompt l")) and second.max_tokens == 1
    assert traffic.trace_summary["clipped"] == 1


class CountingPromptMaker(PromptMaker):
    """Counts the prompts drawn."""

    def __init__(self):
        super().__init__(None, vocab_size=100)
        self.drawn = 0

    def synthetic(self, num_tokens, rng):
        self.drawn += 1
        return super().synthetic(num_tokens, rng)


def huge_scenario(traffic):
    from engine import EngineConfig
    from workbench.traffic.scenario import Scenario, ScenarioEvent

    return Scenario(
        name="huge",
        engine=EngineConfig(model="simulated:llama-2-7b@h100-80gb"),
        traffic=traffic,
        events=[ScenarioEvent(at_s=0.25, action="inject", count=10**9, prompt_tokens=3, output_tokens=2, tag="burst")],
    )


def test_a_plan_of_two_billion_requests_draws_only_those_sent():
    """Issue 19 #6: the whole plan was drawn up front, so a huge count froze the engine thread."""
    from workbench.traffic.request_plan import RequestPlan

    maker = CountingPromptMaker()
    traffic = TrafficProfile(arrival="constant", rate=10.0, num_requests=10**9, prompt_len=LengthDistribution(mean=4))
    plan = RequestPlan(huge_scenario(traffic), max_model_len=64, prompt_maker=maker)
    assert plan.total == 2 * 10**9 and maker.drawn == 0
    sent = [plan.pop_timed() for _ in range(4)]
    # Traffic at 0.1 and 0.2 s, then the injected burst at 0.25 s, whose requests keep their own tag and length.
    assert [(request.arrival_s, request.tag, len(request.prompt_token_ids)) for request in sent] == [
        (pytest.approx(0.1), "chat", 4),
        (pytest.approx(0.2), "chat", 4),
        (0.25, "burst", 3),
        (0.25, "burst", 3),
    ]
    assert maker.drawn == 4
    assert plan.count_rest() == 2 * 10**9 - 4 and not plan.has_timed and maker.drawn == 4


def test_traffic_ended_by_a_duration_is_counted_by_its_arrival_times_alone():
    from workbench.traffic.request_plan import RequestPlan

    maker = CountingPromptMaker()
    traffic = TrafficProfile(arrival="constant", rate=10.0, num_requests=0, duration_s=1.0)
    plan = RequestPlan(huge_scenario(traffic), max_model_len=64, prompt_maker=maker)
    assert plan.total is None
    plan.pop_timed()
    assert plan.count_rest() == 10 - 1 + 10**9 and maker.drawn == 1


def test_a_trace_plan_knows_its_count_and_uniform_lengths_stay_within_their_bounds(tmp_path):
    from engine import EngineConfig
    from workbench.traffic.request_plan import RequestPlan
    from workbench.traffic.scenario import Scenario

    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(f'{{"arrival_s": {index / 10}, "prompt_tokens": 5, "output_tokens": 2}}\n' for index in range(4))
    )
    profile = TrafficProfile(prompts="trace", trace_file=str(trace), num_requests=0)
    plan = RequestPlan(
        Scenario(name="t", engine=EngineConfig(model="simulated:llama-2-7b@h100-80gb"), traffic=profile),
        max_model_len=64,
        prompt_maker=PromptMaker(None, 100),
    )
    assert plan.total == 4 and plan.count_rest() == 4
    lengths = {
        LengthDistribution(kind="uniform", low=3, high=5).sample(np.random.default_rng(seed), limit=100)
        for seed in range(200)
    }
    assert lengths == {3, 4, 5}  # both bounds included, nothing past high
    with pytest.raises(ConfigError, match="^num_requests, duration_s: set at least one, or the traffic never ends$"):
        TrafficProfile(num_requests=0, duration_s=0)
