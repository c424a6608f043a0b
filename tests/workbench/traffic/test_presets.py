"""Presets load onto the engine's dataclasses; each kind of mistake gets its own message."""

from __future__ import annotations

import dataclasses
import re

import pytest

from engine import ConfigError, EngineConfig
from workbench.analysis.intervals import PAIR_LEVEL, requests_to_bound
from workbench.analysis.verdict import MIN_SUBGROUP_REQUESTS
from workbench.traffic.presets import load_preset, preset_names
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import SLO

REQUIRED = {"chat-steady", "chat-burst", "long-prompt-isolation", "kv-pressure", "prefix-sharing"}


def test_required_presets_ship_and_every_variant_loads():
    assert REQUIRED <= set(preset_names())
    for name in preset_names():
        scenario = load_preset(name)
        assert scenario.name == name and scenario.description
        for variant_name, variant in scenario.variants.items():
            applied = load_preset(name, variant=variant_name)
            assert applied.name == name
            for key, value in variant.engine.items():
                assert getattr(applied.engine, key) == value, (name, variant_name, key)
            for key, value in variant.traffic.items():
                actual = getattr(applied.traffic, key)
                assert (
                    (dataclasses.asdict(actual) | value == dataclasses.asdict(actual))
                    if isinstance(value, dict)
                    else actual == value
                )


def test_long_prompt_isolation_variants_differ_only_in_admission():
    off = load_preset("long-prompt-isolation", variant="admission-off")
    on = load_preset("long-prompt-isolation", variant="admission-on")
    assert off.engine.long_prompt_threshold == 0 and on.engine.long_prompt_threshold > 0
    assert off.events == on.events and off.seed == on.seed
    assert off.traffic is None and on.traffic is None  # only the scripted arrivals
    assert max(event.prompt_tokens for event in on.events) <= 8192 - 32  # scaled to the model's context


def test_the_a_a_preset_runs_two_identical_arms_of_the_default_configuration_on_int4_vs_nones_traffic():
    a, b = (load_preset("same-twice", variant=name) for name in ("a", "b"))
    assert a.engine == b.engine and a.traffic == b.traffic and a.slo == b.slo and a.seed == b.seed
    assert a.engine.quantization == EngineConfig().quantization
    assert a.traffic == load_preset("int4-vs-none").traffic
    assert a.decision.intended == ["tpot_p50_ms:-0%"]


def test_the_32k_scenario_runs_on_gemma_within_its_context():
    off = load_preset("long-prompt-isolation-32k", variant="admission-off")
    on = load_preset("long-prompt-isolation-32k", variant="admission-on")
    assert off.engine.model == on.engine.model == "gemma3-270m"
    assert off.engine.long_prompt_threshold == 0 and on.engine.long_prompt_threshold > 0
    assert off.events == on.events and off.seed == on.seed
    long_prompt = max(event.prompt_tokens + event.output_tokens for event in on.events)
    assert 32_000 <= long_prompt <= 32_768  # Gemma 3 270M's context
    assert sum(event.count for event in on.events if event.tag == "chat") == 20


def write(tmp_path, text):
    path = tmp_path / "my.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'name = "x"\n[engine]\nmax_num_seqz = 4\n[traffic]\nrate = 1.0',
            r"my.toml: unknown key 'engine.max_num_seqz'; expected one of model, device",
        ),
        (
            'name = "x"\n[engine]\nmax_num_seqs = "many"\n[traffic]\nrate = 1.0',
            r"my.toml: engine.max_num_seqs: expected an integer, got 'many'",
        ),
        (
            'name = "x"\n[engine]\nblock_size = 0\n[traffic]\nrate = 1.0',
            r"my.toml: engine: block_size: expected an integer from 1 to 65,536, got 0",
        ),
        (
            'name = "x"\n[traffic]\nrate = -2.0',
            r"my.toml: traffic: rate: expected a positive number of requests/s, got -2.0",
        ),
        (
            'name = "x"\n[traffic]\nprompt_len = { kind = "zipf" }',
            r"my.toml: traffic.prompt_len: kind: expected one of fixed, uniform",
        ),
        (
            'name = "x"\n[slo]\nttft_ms = 0\n[traffic]\nrate = 1.0',
            r"my.toml: slo: ttft_ms: expected a positive number of milliseconds",
        ),
        ('name = "x"', r"my.toml: traffic, events: a scenario needs background traffic or an inject event"),
        (
            'name = "x"\n[traffic]\nrate = 1.0\n[decision]\nbaseline = "a"\ncandidate = "b"',
            r"my.toml: decision.baseline: 'a' is not a variant",
        ),
        ('name = = "x"', r"my.toml: not valid TOML"),
    ],
)
def test_bad_presets_name_file_key_and_expectation(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_preset(write(tmp_path, text))


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ConfigError, match="unknown preset 'chat-stedy'; known presets: .*chat-steady"):
        load_preset("chat-stedy")


@pytest.mark.parametrize(
    "override, message",
    [
        ("traffic.rate=nan", "traffic.rate: expected a finite number, got nan"),
        ("traffic.rate=inf", "traffic.rate: expected a finite number, got inf"),
        ("traffic.duration_s=nan", "traffic.duration_s: expected a finite number"),
        ("traffic.burstiness=nan", "traffic.burstiness: expected a finite number"),
        ("slo.ttft_ms=nan", "slo.ttft_ms: expected a finite number"),
        ("traffic.prompt_len.mean=nan", "traffic.prompt_len.mean: expected a finite number"),
        ("engine.kv_cache_memory=nan", "engine.kv_cache_memory"),
    ],
)
def test_nan_and_infinity_are_refused_before_anything_loads(override, message):
    """They passed the [traffic] and [slo] checks (every comparison with NaN is false), loaded the
    model, then failed with a traceback."""
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_preset("chat-burst", [override])


def test_traffic_and_slo_built_in_code_refuse_nan_too():
    with pytest.raises(ConfigError, match="rate: expected a finite number, got nan"):
        TrafficProfile(rate=float("nan"))
    with pytest.raises(ConfigError, match="mean: expected a finite number, got inf"):
        LengthDistribution(mean=float("inf"))
    with pytest.raises(ConfigError, match="e2e_ms: expected a finite number, got nan"):
        SLO(e2e_ms=float("nan"))


def test_overrides_apply_before_validation_and_win_over_variants():
    scenario = load_preset("long-prompt-isolation", ["engine.max_num_seqs=8", "seed=5"], variant="admission-on")
    assert scenario.engine.max_num_seqs == 8 and scenario.seed == 5
    forced = load_preset("long-prompt-isolation", ["engine.long_prompt_threshold=64"], variant="admission-off")
    assert forced.engine.long_prompt_threshold == 64
    with pytest.raises(ConfigError, match="chat-steady.toml: engine.max_num_seqs: expected an integer, got 'lots'"):
        load_preset("chat-steady", ["engine.max_num_seqs=lots"])
    with pytest.raises(ConfigError, match="no variant 'fast'"):
        load_preset("long-prompt-isolation", variant="fast")


def test_a_bad_value_in_a_presets_file_is_overridden_by_set_and_refused_without_it(tmp_path):
    """Issue 77 #13: the preset was validated before `--set` applied, so a bad [engine] value in the
    file could not be replaced from the command line; in a variant's preset, too."""
    preset = tmp_path / "bad.toml"
    preset.write_text(
        "[engine]\nmax_num_seqs = 0\n[traffic]\nnum_requests = 2\n"
        "[variants.a.engine]\nblock_size = 8\n[variants.b.engine]\nblock_size = 32\n"
    )
    with pytest.raises(ConfigError, match="bad.toml: engine: max_num_seqs: expected an integer from 1"):
        load_preset(str(preset))
    assert load_preset(str(preset), ["engine.max_num_seqs=4"]).engine.max_num_seqs == 4
    fixed = load_preset(str(preset), ["engine.max_num_seqs=4"], variant="a").engine
    assert (fixed.max_num_seqs, fixed.block_size) == (4, 8)


def test_engine_defaults_fill_only_what_the_preset_and_the_overrides_leave_out(tmp_path):
    """`workbench bench` compiles before a measured run unless the preset says otherwise."""
    defaults = {"compile_decode": "blocking"}
    assert load_preset("chat-steady", engine_defaults=defaults).engine.compile_decode == "blocking"
    assert (
        load_preset("chat-steady", ["engine.compile_decode=off"], engine_defaults=defaults).engine.compile_decode
        == "off"
    )
    preset = tmp_path / "eager.toml"
    preset.write_text('[engine]\ncompile_decode = "background"\n[traffic]\nnum_requests = 2\n')
    assert load_preset(str(preset), engine_defaults=defaults).engine.compile_decode == "background"


def requests_behind(scenario, metric: str) -> int:
    """How many requests a run of the scenario gives the metric: its tag's, or every request."""
    tag = metric.rpartition("/")[0] or None
    traffic = scenario.traffic
    from_traffic = traffic.num_requests if traffic and tag in (None, traffic.tag) else 0
    injected = sum(event.count for event in scenario.events if event.action == "inject" and tag in (None, event.tag))
    return from_traffic + injected


def test_every_presets_percentile_terms_can_be_decided_at_the_presets_n():
    """A term on a percentile its runs cannot bound is undecidable by construction: the p99 of 20
    chats has no upper bound (a comparison of one pair needs 437 requests a run). A tag too small
    to judge at all (one long prompt) is recorded and said to be not judged, never decided."""
    checked = 0
    for name in preset_names():
        scenario = load_preset(name)
        if scenario.decision is None:
            continue
        for criterion in (*scenario.decision.intended, *scenario.decision.tolerated):
            metric = criterion.partition(":")[0]
            match = re.search(r"_p(\d+)_ms$", metric)
            n = requests_behind(scenario, metric)
            if match is None or ("/" in metric and n < MIN_SUBGROUP_REQUESTS):
                continue
            assert n >= requests_to_bound(int(match[1]), PAIR_LEVEL), (name, criterion, n)
            checked += 1
    assert checked >= 6
