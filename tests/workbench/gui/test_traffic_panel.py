"""The traffic panel shows what a run will send: for a trace preset, what the replay reads (the
file, its time scale, where it starts, how long and how many), not an arrival process and lengths
that would not run."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.gui.traffic_panel import TrafficPanel


@pytest.fixture
def panel(qtbot):
    panel = TrafficPanel()
    qtbot.addWidget(panel)
    panel.show()
    return panel


def shown(panel, widget) -> bool:
    return panel.shape.isRowVisible(widget)


def test_a_trace_preset_shows_what_its_replay_reads_not_an_arrival_process(panel):
    entry = "azure-conv / bundled"
    preset = panel.preset_scenario(entry)
    panel.show_scenario(preset, entry)
    # It showed Poisson at 2 req/s and 128/64-token lengths, and a rate typed there changed nothing.
    for widget in (panel.arrival, panel.rate, panel.prompt_len.kind, panel.prompt_len.mean, panel.output_len.mean):
        assert not shown(panel, widget)
    assert all(shown(panel, widget) for widget in (panel.trace_file, panel.time_scale, panel.trace_start))
    assert panel.trace_file.text().startswith("conv.csv: arrival times, prompt and output lengths as recorded")
    assert (panel.time_scale.value(), panel.num_requests.value()) == (20.0, 20)
    assert panel.scenario().traffic == preset.traffic  # as shown, Start runs the preset's traffic


def test_a_trace_replays_faster_from_later_over_the_whole_trace_as_set(panel):
    entry = "azure-conv / bundled"
    preset = panel.preset_scenario(entry)
    panel.show_scenario(preset, entry)
    panel.time_scale.setValue(0.5)
    panel.trace_start.setValue(600.0)
    panel.duration.setValue(120.0)
    panel.num_requests.setValue(0)  # the whole trace: it could not be set (the field's minimum was 1)
    assert panel.num_requests.text() == "the whole trace"
    scenario = panel.scenario()
    expected = dataclasses.replace(
        preset.traffic, time_scale=0.5, trace_start_s=600.0, duration_s=120.0, num_requests=0
    )
    assert scenario.traffic == expected and scenario.name == f"{entry} (edited)"


def test_leaving_the_trace_brings_the_arrival_fields_back(panel):
    panel.show_scenario(panel.preset_scenario("azure-conv / bundled"), "azure-conv / bundled")
    panel.prompts.setCurrentText("synthetic")
    assert shown(panel, panel.arrival) and shown(panel, panel.rate) and shown(panel, panel.prompt_len.mean)
    assert not shown(panel, panel.time_scale) and panel.num_requests.specialValueText() == "no limit"
    traffic = panel.scenario().traffic
    assert traffic.prompts == "synthetic" and traffic.arrival == panel.arrival.currentText()


def test_the_panel_is_built_from_the_registries_a_new_arrival_setting_gets_a_field(qtbot, monkeypatch):
    """Issue 60 #5: the prompts list was ["synthetic", "sharegpt"] whatever the registry held, and
    an arrival process reading a setting no widget was named after failed with an AttributeError.
    A process registered with a setting of its own (here the traffic's temperature) gets a field,
    shown while it is chosen, and Start runs what that field holds."""
    from workbench.traffic.arrivals import ARRIVALS, ArrivalProcess
    from workbench.traffic.sources import PROMPT_SOURCES

    warm = ArrivalProcess("warm_poisson", ARRIVALS["poisson"].unit_gaps, ("rate", "temperature"))
    monkeypatch.setitem(ARRIVALS, "warm_poisson", warm)
    panel = TrafficPanel()
    qtbot.addWidget(panel)
    panel.show()
    offered = [panel.prompts.itemText(index) for index in range(panel.prompts.count())]
    assert offered == [name for name, source in PROMPT_SOURCES.items() if source.offered_in_window]
    assert "sessions" in offered and "trace" not in offered
    temperature = panel.setting_boxes["temperature"]
    assert not shown(panel, temperature)
    panel.arrival.setCurrentText("warm_poisson")
    assert shown(panel, temperature) and shown(panel, panel.rate) and not shown(panel, panel.burstiness)
    temperature.setValue(0.7)
    traffic = panel.scenario().traffic
    assert (traffic.arrival, traffic.temperature) == ("warm_poisson", 0.7)


def test_a_sessions_source_shows_and_sends_its_own_settings(panel):
    panel.prompts.setCurrentText("sessions")
    assert shown(panel, panel.think_time) and shown(panel, panel.turns) and not shown(panel, panel.shared_prefix)
    panel.think_time.setValue(2.5)
    panel.turns.setValue(3)
    traffic = panel.scenario().traffic
    assert (traffic.prompts, traffic.think_time_s, traffic.turns) == ("sessions", 2.5, 3)
    panel.prompts.setCurrentText("synthetic")
    assert shown(panel, panel.shared_prefix) and not shown(panel, panel.think_time)
