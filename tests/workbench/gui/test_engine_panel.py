"""The engine panel round-trips a configuration, including cache sizes its MiB box cannot show."""

from __future__ import annotations

from engine import EngineConfig
from engine.simulation import SimulatedTarget, is_simulated
from engine.simulation.catalogue import model_names
from workbench.gui.engine_panel import EnginePanel


def test_a_preset_fraction_or_block_count_survives_until_the_size_is_edited(qtbot):
    panel = EnginePanel()
    qtbot.addWidget(panel)
    panel.set_config(EngineConfig(kv_cache_memory=0.5, quantization="w8a8"))
    assert panel.config().kv_cache_memory == 0.5 and panel.config().quantization == "w8a8"
    assert panel.kv_cache_source.text() == "set by the preset: 50% of free memory (edit the size to replace)"
    panel.kv_cache_mib.setValue(256)
    assert panel.config().kv_cache_memory == 256 << 20 and panel.kv_cache_source.text() == ""

    panel.set_config(EngineConfig(num_kv_blocks=4096))
    assert panel.config().num_kv_blocks == 4096 and "4,096 blocks" in panel.kv_cache_source.text()
    panel.kv_cache_mib.setValue(512)
    assert panel.config().num_kv_blocks is None

    panel.set_config(EngineConfig(kv_cache_memory=64 << 20))
    assert panel.config().kv_cache_memory == 64 << 20 and panel.kv_cache_mib.value() == 64


def test_speculation_settings_round_trip(qtbot):
    panel = EnginePanel()
    qtbot.addWidget(panel)
    assert panel.config().speculative_method == "off"
    settings = dict(speculative_method="ngram", num_speculative_tokens=5, prompt_lookup_min=3, prompt_lookup_max=6)
    panel.set_config(EngineConfig(**settings, draft_acceptance_rate=0.55, draft_cost_fraction=0.2))
    config = panel.config()
    assert {key: getattr(config, key) for key in settings} == settings
    assert (config.draft_acceptance_rate, config.draft_cost_fraction) == (0.55, 0.2)


def test_only_the_chosen_speculation_methods_settings_are_enabled(qtbot):
    panel = EnginePanel()
    qtbot.addWidget(panel)
    lookup, draft = (panel.lookup_min, panel.lookup_max), (panel.draft_acceptance, panel.draft_cost)
    common = (panel.speculative_tokens, panel.speculative_schedule)

    def enabled(boxes):
        return [box.isEnabled() for box in boxes]

    assert enabled(common + lookup + draft) == [False] * 6
    panel.set_config(EngineConfig(speculative_method="ngram", prompt_lookup_min=3))
    assert enabled(common + lookup) == [True] * 4 and enabled(draft) == [False] * 2
    panel.speculative_method.setCurrentText("draft")
    assert enabled(common + draft) == [True] * 4 and enabled(lookup) == [False] * 2
    assert panel.config().prompt_lookup_min == 3  # disabled, kept


def test_the_default_cache_size_is_auto_and_round_trips(qtbot):
    panel = EnginePanel()
    qtbot.addWidget(panel)
    assert panel.config().kv_cache_memory is None and panel.kv_cache_mib.text() == "auto"
    panel.set_config(EngineConfig(kv_cache_memory=64 << 20, long_prompt_max_wait_s=2.5))
    panel.set_config(EngineConfig())
    assert panel.config().kv_cache_memory is None and panel.config().long_prompt_max_wait_s == 5.0


def test_the_default_quantization_is_auto_and_the_file_decides_group_size_and_head(qtbot):
    panel = EnginePanel()
    qtbot.addWidget(panel)
    assert panel.config().quantization == "auto"
    assert not panel.quantize_head.isEnabled() and not panel.group_size.isEnabled()
    panel.set_config(EngineConfig(quantization="int4", group_size=64, quantize_lm_head=True))
    assert panel.quantize_head.isEnabled() and panel.group_size.isEnabled()
    assert (panel.config().quantization, panel.config().group_size, panel.config().quantize_lm_head) == (
        "int4",
        64,
        True,
    )


def test_each_setting_the_panel_shows_is_explained_by_its_fields_help(qtbot):
    """Each knob's help is written once, in engine/configuration/config.py: the tooltips, docs/knobs.md and the
    --set help come from it (they were three texts that drifted apart)."""
    from dataclasses import fields

    from PySide6.QtWidgets import QWidget

    from engine.configuration.config import knob_help

    panel = EnginePanel()
    qtbot.addWidget(panel)
    tooltips = {widget.toolTip() for widget in panel.findChildren(QWidget)}
    shown = {knob.name for knob in fields(EngineConfig) if knob_help(knob.name) in tooltips}
    # The window runs one engine: a deployment of several instances runs headless.
    deployment = {"data_parallel_size", "prefill_instances"}
    not_in_the_panel = {"max_model_len", "num_kv_blocks", "simulation_speed", "seed", "step_trace", *deployment}
    assert shown == {knob.name for knob in fields(EngineConfig)} - not_in_the_panel


def test_the_model_list_shows_every_entry_whole_and_distinct(qtbot):
    """The narrow field cut two simulated entries to the same text in its list."""
    panel = EnginePanel()
    qtbot.addWidget(panel)
    panel.show()
    view = panel.model.view()
    entries = [panel.model.itemText(row) for row in range(panel.model.count())]
    assert view.minimumWidth() >= max(view.fontMetrics().horizontalAdvance(entry) for entry in entries)
    panel.model.showPopup()
    qtbot.waitUntil(view.isVisible)
    shown = [view.fontMetrics().elidedText(entry, view.textElideMode(), view.viewport().width()) for entry in entries]
    assert shown == entries  # whole, so distinct
    panel.model.hidePopup()


def test_the_model_list_offers_every_catalogued_model_on_enough_gpus(qtbot):
    """Issue 79 #5: the window's simulated models were a hard-coded list of five while the catalogue
    (presets/catalogue/models.toml) held twelve; now each is offered, on as many H100s as leave half
    their memory for the KV cache."""
    panel = EnginePanel()
    qtbot.addWidget(panel)
    entries = [panel.model.itemText(row) for row in range(panel.model.count())]
    targets = {
        SimulatedTarget.parse(entry).model: SimulatedTarget.parse(entry) for entry in entries if is_simulated(entry)
    }
    assert set(targets) == set(model_names())
    assert targets["llama-3-8b"].gpu_count == 1 and targets["llama-3-70b"].gpu_count == 4
    assert {target.gpu for target in targets.values()} == {"h100-80gb"}
