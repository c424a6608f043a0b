"""A preset chosen while a run has requests in flight: the window asks before it touches anything.
"No" leaves the engine, the run, its requests, the panels and the log as they were; "Yes" ends
the old run's requests in the old run, then loads the preset's engine and runs it."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt

from engine import EngineConfig
from tests.workbench.gui.window_helpers import all_ended, load
from workbench.runs.run_log import read_run_log
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import Scenario

TRAFFIC = TrafficProfile(
    arrival="poisson",
    rate=200.0,
    num_requests=12,
    prompt_len=LengthDistribution(mean=12),
    output_len=LengthDistribution(mean=60),
)


def start_a_run_with_requests_in_flight(window, qtbot, tiny_config) -> None:
    load(window, qtbot, tiny_config)
    window.run_preset(Scenario(name="first", engine=tiny_config, traffic=TRAFFIC), "first / default")
    qtbot.waitUntil(lambda: window.worker.requests_in_flight() > 0, timeout=30_000)


def test_no_to_a_preset_with_other_engine_settings_leaves_everything_as_it_was(window, qtbot, tiny_config):
    start_a_run_with_requests_in_flight(window, qtbot, tiny_config)
    info, log_path, label = window.info, window.worker.run_log_path, window.traffic_panel.preset_label.text()
    asked = []

    def answer_no(in_flight: int, reload: bool = False) -> bool:
        asked.append(reload)
        return False

    window.confirm_new_run = answer_no
    other_engine = dataclasses.replace(tiny_config, max_num_seqs=3)
    window.run_preset(Scenario(name="second", engine=other_engine, traffic=TRAFFIC), "second / default")
    assert asked == [True]  # asked once, saying the engine would be reloaded
    assert window.engine_panel.config() == tiny_config and window.traffic_panel.preset_label.text() == label
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished" and all_ended(window), timeout=60_000)
    # No load ran: the same engine, the same run and log, every request to its own end.
    assert window.info is info and window.info.config == tiny_config
    assert window.worker.run_log_path == log_path
    log = read_run_log(log_path)
    assert log.header["scenario"]["name"] == "first"
    assert len(log.requests) == TRAFFIC.num_requests
    assert {ended["finish_reason"] for ended in log.requests} == {"length"}


def test_yes_ends_the_old_runs_requests_in_it_then_loads_the_presets_engine(window, qtbot, tiny_config):
    start_a_run_with_requests_in_flight(window, qtbot, tiny_config)
    first_store = window.worker.store
    other_engine = dataclasses.replace(tiny_config, max_num_seqs=3)
    window.run_preset(Scenario(name="second", engine=other_engine, traffic=TRAFFIC), "second / default")
    qtbot.waitUntil(
        lambda: window.info.config == other_engine and window.worker.store is not first_store and all_ended(window),
        timeout=60_000,
    )
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished", timeout=60_000)
    assert window.engine_panel.config() == other_engine
    # Every request the first run sent ended in it, those in flight at the reload aborted (a reload
    # used to close the run without them: they were in no figure and no log).
    ended = first_store.snapshot().requests
    assert ended["ttft_ms"].size == first_store.requests_sent >= 1 and (ended["finished"] == 0).any()
    second = read_run_log(window.worker.run_log_path)
    assert second.header["scenario"]["name"] == "second" and len(second.requests) == TRAFFIC.num_requests


def test_start_apply_and_close_with_a_run_in_flight_keep_every_earlier_run(window, qtbot, tiny_config, tmp_path):
    """Issue 58 #1: a new run, an Apply and closing the window each rewrote the one run log, and
    the dialog promised the requests in flight "end in the current run's log". Each run now has a
    folder of its own, kept whole: its requests to the last, a footer saying what stopped it."""
    folders = []

    def start(name: str) -> None:
        window.start_traffic(Scenario(name=name, engine=tiny_config, traffic=TRAFFIC))
        qtbot.waitUntil(lambda: window.worker.run_folder not in (None, *folders), timeout=30_000)
        folders.append(window.worker.run_folder)
        qtbot.waitUntil(lambda: window.worker.requests_in_flight() > 0, timeout=30_000)

    load(window, qtbot, tiny_config)
    start("first")
    start("second")  # Start, "Yes" to the new run
    window.apply_config(dataclasses.replace(tiny_config, max_num_seqs=3))  # Apply, "Yes" to the reload
    qtbot.waitUntil(lambda: window.info.config.max_num_seqs == 3, timeout=60_000)
    start("third")
    window.close()  # mid-run
    assert not window.worker._thread.is_alive()
    assert [folder.parent for folder in folders] == [tmp_path / "runs"] * 3
    for folder, name, stopped_by in zip(
        folders, ("first", "second", "third"), ("a new run started", "the engine was reloaded", "the window closed")
    ):
        log = read_run_log(folder / "run.jsonl")
        assert log.header["scenario"]["name"] == name and log.footer["stopped_by"] == stopped_by
        assert len(log.requests) + log.footer["requests_not_sent"] == TRAFFIC.num_requests
        assert (folder / "report.json").exists()


def test_a_refused_deployment_runs_nothing(window, qtbot, tiny_config):
    """Issue 58 #3: a deployment preset's load was refused in one line, then its traffic ran on
    the engine already loaded, with a log header naming the refused deployment."""
    load(window, qtbot, tiny_config)
    panel, label = window.engine_panel.config(), window.traffic_panel.preset_label.text()
    deployment = EngineConfig(model="simulated:llama-3-70b@8xh100-80gb", tensor_parallel_size=4, data_parallel_size=2)
    window.run_preset(Scenario(name="colocated", engine=deployment, traffic=TRAFFIC), "azure-conv / colocated")
    qtbot.waitUntil(lambda: "deployment" in window.error_label.text(), timeout=30_000)
    qtbot.wait(500)  # the traffic it was sent with would have started by now
    assert window.worker.run_folder is None and window.worker.requests_sent() == 0
    assert window.info.config == tiny_config and not window.traffic_label.text().startswith("traffic: running")
    # Issue 77 #2: the panels showed the refused deployment, and Start then did nothing, unsaid.
    assert window.engine_panel.config() == panel and window.traffic_panel.preset_label.text() == label
    window.start_traffic(Scenario(name="after the refusal", engine=tiny_config, traffic=TRAFFIC))
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished" and all_ended(window), timeout=60_000)
    assert read_run_log(window.worker.run_log_path).header["scenario"]["engine"] == dataclasses.asdict(tiny_config)


def test_a_preset_applies_its_engine_settings_on_top_of_those_applied_and_says_which(window, qtbot, tiny_config):
    """Issue 77 #3: double-clicking a preset reset an int8 cache and n-gram speculation the user
    had applied to the defaults, unsaid. chat-steady sets max_num_seqs and max_num_batched_tokens."""
    applied = dataclasses.replace(tiny_config, kv_cache_dtype="int8", speculative_method="ngram")
    load(window, qtbot, applied)
    panel = window.traffic_panel
    panel.presets.itemActivated.emit(panel.presets.findItems("chat-steady", Qt.MatchFlag.MatchExactly)[0])
    expected = dataclasses.replace(applied, max_num_seqs=32, max_num_batched_tokens=512)
    qtbot.waitUntil(lambda: window.info.config == expected and window.worker.run_folder is not None, timeout=60_000)
    assert window.engine_panel.config() == expected
    assert panel.preset_label.text().endswith(
        "Engine: as applied, with the preset's max_num_seqs = 32, max_num_batched_tokens = 512"
    )
    window.stop_traffic()


def test_enter_runs_a_preset_and_no_to_the_switch_leaves_the_traffic_fields(window, qtbot, tiny_config):
    """Issue 58 #5: Enter on a preset did nothing, and a "No" to a preset switch still wrote the
    other preset's traffic into the fields (the next Start ran it)."""
    from PySide6.QtCore import Qt

    start_a_run_with_requests_in_flight(window, qtbot, tiny_config)
    fields_before, label_before = window.traffic_panel.scenario().traffic, window.traffic_panel.preset_label.text()
    asked = []
    window.confirm_new_run = lambda in_flight, reload=False: asked.append(reload) or False
    presets = window.traffic_panel.presets
    entry = next(presets.item(row) for row in range(presets.count()) if presets.item(row).text() == "chat-burst")
    presets.setCurrentItem(entry)
    presets.setFocus()
    qtbot.keyClick(presets, Qt.Key.Key_Return)
    assert asked == [True]  # Enter asked to run it; the answer was No
    assert window.traffic_panel.scenario().traffic == fields_before
    assert window.traffic_panel.preset_label.text() == label_before and "'first'" in label_before
