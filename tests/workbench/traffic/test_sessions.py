"""Multi-turn sessions: each next turn arrives after the previous one ended, with the conversation
so far as its prompt, so the prefix cache finds the previous prompt; and the report and the live
plot show the hit rate."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from engine import ConfigError, EngineConfig, LLMEngine
from workbench.backends.local import LocalBackend
from workbench.bench.headless import run_headless
from workbench.live.metrics_store import MetricsStore
from workbench.runs.run_log import read_run_log
from workbench.runs.runner import ScenarioRunner
from workbench.traffic.planned_traffic import PlannedTraffic
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.prompts import PromptMaker
from workbench.traffic.scenario import SLO, Scenario

SIMULATED = "simulated:llama-3-8b@a100-80gb"


def sessions_profile(**settings) -> TrafficProfile:
    values = dict(
        prompts="sessions",
        rate=4.0,
        num_requests=5,
        turns=3,
        think_time_s=1.0,
        prompt_len=LengthDistribution(kind="fixed", mean=40),
        output_len=LengthDistribution(kind="fixed", mean=20),
        tag="session",
    )
    return TrafficProfile(**{**values, **settings})


def test_a_sessions_next_turn_carries_the_conversation_so_far_and_comes_after_a_think_time():
    traffic = PlannedTraffic(sessions_profile(), PromptMaker(None, vocab_size=100), 0, max_model_len=4096)
    first = traffic.next_request(0.5)
    second = traffic.follow_up(first.session, ended_s=10.0)
    third = traffic.follow_up(first.session, ended_s=20.0)
    assert traffic.follow_up(first.session, ended_s=30.0) is None  # three turns
    assert len(first.prompt_token_ids) == 40 and first.max_tokens == 20
    # The previous prompt, the previous answer's 20 tokens, the new question's 40.
    assert second.prompt_token_ids[:40] == first.prompt_token_ids and len(second.prompt_token_ids) == 100
    assert third.prompt_token_ids[:100] == second.prompt_token_ids and len(third.prompt_token_ids) == 160
    assert second.arrival_s > 10.0 and third.arrival_s > 20.0
    assert second.session == third.session == first.session


def test_each_session_gets_the_same_turns_whatever_the_order_the_others_end_in():
    def turns(order):
        traffic = PlannedTraffic(sessions_profile(), PromptMaker(None, vocab_size=100), 7, max_model_len=4096)
        drawn = {}
        for step in order:  # "s": start the next session; a number: that session's next turn
            request = traffic.next_request(0.0) if step == "s" else traffic.follow_up(step, 1.0)
            drawn.setdefault(request.session, []).append((request.prompt_token_ids, request.arrival_s))
        return drawn

    assert turns(["s", "s", 0, 1, 0, 1]) == turns(["s", 0, 0, "s", 1, 1])


def test_a_session_that_outgrows_the_context_ends_and_is_counted():
    traffic = PlannedTraffic(sessions_profile(), PromptMaker(None, vocab_size=100), 0, max_model_len=128)
    first = traffic.next_request(0.0)
    assert traffic.follow_up(first.session, 1.0) is not None  # 100 tokens fit in 128
    assert traffic.follow_up(first.session, 2.0) is None  # 160 do not
    assert traffic.sessions.cut_by_context == 1


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"arrival": "closed_loop"}, "sessions start by an arrival process"),
        ({"turns": 0}, "expected turns >= 1"),
        ({"think_time_s": -1.0}, "think_time_s >= 0"),
    ],
)
def test_bad_session_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        sessions_profile(**settings)


def run_sessions(tmp_path, caching: bool):
    scenario = Scenario(
        name="sessions",
        engine=EngineConfig(model=SIMULATED, enable_prefix_caching=caching),
        traffic=sessions_profile(),
        slo=SLO(ttft_ms=1000),
    )
    prompts = {}
    backend = LocalBackend(LLMEngine(scenario.engine))
    original_submit = backend.submit

    def submit(prompt, params, **kwargs):
        prompts[kwargs["request_id"]] = tuple(prompt)
        return original_submit(prompt, params, **kwargs)

    backend.submit = submit
    report = run_headless(scenario, tmp_path, backend=backend)
    return report, prompts, read_run_log(tmp_path / "run.jsonl")


def test_turns_follow_their_previous_turns_end_and_the_prefix_cache_finds_them(tmp_path):
    report, prompts, log = run_sessions(tmp_path, caching=True)
    records = {record["request_id"]: record for record in log.requests}
    assert len(records) == 15 and report["complete"]
    follow_ups = 0
    for request_id, prompt in prompts.items():
        previous = [
            other for other, earlier in prompts.items() if other != request_id and prompt[: len(earlier)] == earlier
        ]
        if previous:  # the longest earlier prompt it starts with: its previous turn
            before = max(previous, key=lambda other: len(prompts[other]))
            assert records[request_id]["arrival_time"] >= records[before]["finish_time"]
            follow_ups += 1
    assert follow_ups == 10  # two later turns in each of five sessions
    hits = report["metrics"]["prefix_cache_hit_perc"]
    assert hits["value"] > 30 and hits["n"] == sum(len(prompt) for prompt in prompts.values())
    cut = report["metrics"]["sessions_cut_by_context"]
    assert (cut["value"], cut["n"]) == (0, 5)  # n counts sessions (five), not their 15 requests
    # The live plot's line ends at the report's figure.
    _, values = MetricsStore.from_run_log(log).snapshot().overview.line("prefix_hit_perc", None)
    assert values[~np.isnan(values)][-1] == pytest.approx(hits["value"])


def test_without_prefix_caching_the_same_sessions_hit_nothing(tmp_path):
    report, _, _ = run_sessions(tmp_path, caching=False)
    assert report["metrics"]["prefix_cache_hit_perc"]["value"] == 0.0


@pytest.mark.slow
def test_sharegpt_sessions_send_the_conversation_so_far_on_the_bundled_model(tmp_path, smollm_source):
    from engine.loading.sharegpt import load_sharegpt

    maker = PromptMaker(smollm_source.tokenizer, smollm_source.config.vocab_size)
    profile = sessions_profile(output_len=LengthDistribution(kind="fixed", mean=32, low=1, high=32))
    traffic = PlannedTraffic(profile, maker, 0, max_model_len=8192)
    first = traffic.next_request(0.0)
    second = traffic.follow_up(first.session, 5.0)
    if second is None:
        pytest.skip("the drawn conversation has one exchange")
    conversation = next(
        conversation
        for conversation in load_sharegpt().conversations
        if first.messages and conversation.prompt == first.messages[0]["content"]
    )
    text = maker.tokenizer.decode(list(second.prompt_token_ids))
    assert conversation.exchanges[0][0][:200] in text and conversation.exchanges[0][1][:200] in text
    assert conversation.exchanges[1][0][:200] in text
    assert [message["role"] for message in second.messages] == ["user", "assistant", "user"]
    assert json.dumps(second.messages)  # what a server's chat endpoint receives


def test_a_request_whose_abort_goes_unheard_ends_in_its_own_run_not_the_next():
    """A backend that has not ended an aborted request by the deadline (a server that never hears
    the abort): the run it belonged to records it as unfinished, and the next run on the same
    runner (the window's next Start) never sees its end. Before, it ended inside the next run's
    records, and its session turn reached the next run's sessions (IndexError in next_turn, and
    the window's worker dropped its backend)."""
    scenario = Scenario(
        name="sessions",
        engine=EngineConfig(model=SIMULATED),
        traffic=sessions_profile(rate=50.0, num_requests=4, output_len=LengthDistribution(kind="fixed", mean=300)),
        slo=SLO(ttft_ms=1000),
    )
    backend = LocalBackend(LLMEngine(scenario.engine))
    backend.abort = lambda request_id: False  # the abort is lost on its way
    ends = {"first": [], "second": []}
    run = "first"
    runner = ScenarioRunner(backend, scenario, on_request_end=lambda ended: ends[run].append(ended))
    runner.start()
    while runner.num_in_flight < 4:
        runner.tick()
    assert runner.end_in_flight(timeout_s=0.0) == 4
    old_ids = {ended.request_id for ended in ends["first"]}
    assert len(old_ids) == 4 and {ended.metrics.finish_reason for ended in ends["first"]} == {"unfinished"}
    assert all("after its abort" in ended.metrics.finish_detail for ended in ends["first"])
    run = "second"
    runner.load_traffic(scenario)
    runner.run()
    second = ends["second"]
    assert not old_ids & {ended.request_id for ended in second}
    assert len(second) == 4 * 3 and {ended.metrics.finish_reason for ended in second} == {"length"}


def test_think_times_have_the_mean_asked_for():
    """Exponential think times of mean think_time_s (4 s here: with 1 s, a rate mistaken for the
    mean draws the same numbers, and every other test used 1 s). 400 sessions' gaps: their mean
    lies within the Gamma(400, 4 s) distribution's central 99.98% for this seed."""
    traffic = PlannedTraffic(
        sessions_profile(think_time_s=4.0, num_requests=400), PromptMaker(None, vocab_size=100), 11, max_model_len=4096
    )
    gaps = []
    for _ in range(400):
        first = traffic.next_request(0.0)
        gaps.append(traffic.follow_up(first.session, ended_s=0.0).arrival_s)
    low, high = stats.gamma.ppf([1e-4, 1 - 1e-4], a=400, scale=4.0 / 400)
    assert low < np.mean(gaps) < high
