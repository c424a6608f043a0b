"""docs/extending.md's recipe for a traffic source, followed step by step on a toy source, so that
the recipe stays true: registered in PROMPT_SOURCES, its settings checked with one line naming
the key, drawn from the content generator, run end to end on a simulated engine, and offered in
the window with a field for its setting."""

from __future__ import annotations

import json

import pytest

from engine import EngineConfig
from engine.errors import ConfigError
from workbench.bench.headless import run_headless
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.traffic.context_fit import fit_to_context
from workbench.traffic.profile import TrafficProfile
from workbench.traffic.scenario import Scenario
from workbench.traffic.sources import PROMPT_SOURCES, PromptSource


class EchoPrompts(PromptSource):
    """The toy: every prompt `shared_prefix_tokens` synthetic tokens, answered in 4."""

    name = "echo"
    settings = ("shared_prefix_tokens",)  # the single-valued profile fields it reads

    @classmethod
    def check(cls, profile: TrafficProfile) -> None:
        if profile.shared_prefix_tokens < 8:
            raise ConfigError(
                f"shared_prefix_tokens: echo prompts need at least 8 tokens, got {profile.shared_prefix_tokens}"
            )

    def next_request(self, arrival_s):
        context = self.context
        length = context.profile.shared_prefix_tokens
        prompt = context.maker.synthetic(length, context.rng)  # drawn from the content generator
        return context.request(arrival_s, prompt, fit_to_context(length, 4, context.max_model_len))


@pytest.fixture
def echo_registered(monkeypatch):
    monkeypatch.setitem(PROMPT_SOURCES, EchoPrompts.name, EchoPrompts)


def echo_scenario(prefix: int) -> Scenario:
    traffic = TrafficProfile(prompts="echo", rate=50.0, num_requests=12, shared_prefix_tokens=prefix)
    return Scenario(name="echo", engine=EngineConfig(model="simulated:llama-3-8b@a100-80gb"), traffic=traffic)


def test_a_new_source_runs_end_to_end_by_the_recipe(echo_registered, tmp_path):
    report = run_headless(echo_scenario(24), tmp_path)
    assert report["complete"] and report["metrics"]["requests_finished"]["value"] == 12
    log = read_run_log(tmp_path / RUN_LOG_NAME)
    assert {record["num_prompt_tokens"] for record in log.requests} == {24}
    assert {record["planned"]["source"] for record in log.requests} == {"echo"}
    assert {len(record["token_times"]) for record in log.requests} == {4}
    # Same seed, same requests: the source drew only from the traffic's generator.
    again = tmp_path / "again"
    run_headless(echo_scenario(24), again)
    assert (
        json.loads((again / "report.json").read_text())["metrics"]["output_tok_s"] == report["metrics"]["output_tok_s"]
    )


def test_its_check_refuses_a_setting_it_cannot_use_naming_the_key(echo_registered):
    with pytest.raises(ConfigError, match="shared_prefix_tokens: echo prompts need at least 8 tokens, got 2"):
        echo_scenario(2)


def test_the_window_offers_it_with_a_field_for_its_setting(echo_registered, qtbot):
    from workbench.gui.traffic_panel import TrafficPanel

    panel = TrafficPanel()
    qtbot.addWidget(panel)
    panel.show()
    assert panel.prompts.findText("echo") >= 0
    panel.prompts.setCurrentText("echo")
    box = panel.setting_boxes["shared_prefix_tokens"]
    assert panel.shape.isRowVisible(box)
    box.setValue(32)
    traffic = panel.scenario().traffic
    assert (traffic.prompts, traffic.shared_prefix_tokens) == ("echo", 32)
