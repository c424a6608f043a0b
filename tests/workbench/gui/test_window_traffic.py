"""The window with a real worker thread and a tiny model (pytest-qt, offscreen): the traffic panel and
the requests it sends: injections and their SLOs, stop, abort, failed steps and broken engines,
presets, a server. Waits are on conditions, never on fixed sleeps."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from PySide6.QtWidgets import QPushButton

from engine import EngineConfig
from tests.workbench.gui.window_helpers import all_ended, inject, load
from workbench.analysis.report import build_report
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import SLO, Scenario


def test_a_new_run_shows_nothing_of_the_last_runs_requests(window, qtbot, tiny_config):
    """The detail of a previous run's request ("decoding") stayed under the new run."""
    load(window, qtbot, tiny_config)
    traffic = TrafficProfile(arrival="constant", rate=100.0, num_requests=3, output_len=LengthDistribution(mean=4))
    window.start_traffic(Scenario(name="first", traffic=traffic))
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished", timeout=30_000)
    window.refresh_tables()
    first = window.worker.rows()[0].request_id
    window.select_request(first)
    assert window.requests.detail.toPlainText().startswith(first)
    window.explain_current_run(90.0)
    assert window.why.explanation is not None
    window.start_traffic(Scenario(name="second", traffic=traffic))
    assert window.requests.detail.toPlainText() == "" and window.session.selected_request is None
    assert window.why.explanation is None  # it explained the first run


def test_no_to_start_leaves_the_presets_label(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    traffic = TrafficProfile(arrival="constant", rate=200.0, num_requests=8, output_len=LengthDistribution(mean=60))
    window.run_preset(Scenario(name="first", engine=tiny_config, traffic=traffic), "first / default")
    qtbot.waitUntil(lambda: window.worker.requests_in_flight() > 0, timeout=30_000)
    label = window.traffic_panel.preset_label
    assert label.isVisible()
    window.confirm_new_run = lambda in_flight, reload=False: False
    window.traffic_panel.start_button.click()
    assert label.isVisible() and window.worker.requests_in_flight() > 0
    window.confirm_new_run = lambda in_flight, reload=False: True
    window.traffic_panel.start_button.click()
    assert not label.isVisible()  # Start ran the fields, not the preset


def test_injected_requests_are_judged_by_the_slo_fields(window, qtbot, tiny_config):
    """Issue 77 #5: after an Inject with no run, goodput read 100.0% (3 of n=3) at TPOT 2,680 ms
    while the SLO fields said 250 ms: a run of injected requests was judged by no SLO at all."""
    load(window, qtbot, tiny_config)
    panel = window.traffic_panel
    panel.ttft_slo.setValue(900)
    panel.tpot_slo.setValue(1)  # ms/token: the tiny model's steps on a CPU take longer
    panel.burst_count.setValue(3)
    window.on_failed("an earlier error")
    next(button for button in panel.findChildren(QPushButton) if button.text() == "Inject burst of chats").click()
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 3, timeout=30_000)
    fields = SLO(ttft_ms=900, tpot_ms=1, e2e_ms=panel.e2e_slo.value() or None)
    assert window.worker.store.slo == fields
    assert read_run_log(window.worker.run_log_path).header["scenario"]["slo"] == dataclasses.asdict(fields)
    assert window.error_label.text() == ""  # issue 77 #6: a stale error stayed after a good Inject
    meeting, n = window.worker.store.snapshot().goodput
    tpot = window.worker.store.snapshot().requests["tpot_ms"]
    assert n == 3 and meeting == sum(value <= 1 for value in tpot)


def test_stopping_traffic_lets_every_request_finish(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    traffic = TrafficProfile(
        arrival="poisson",
        rate=50.0,
        num_requests=400,
        prompt_len=LengthDistribution(mean=12),
        output_len=LengthDistribution(mean=20),
    )
    window.start_traffic(Scenario(name="t", traffic=traffic, slo=SLO(ttft_ms=1000)))
    qtbot.waitUntil(lambda: len(window.worker.rows()) >= 5, timeout=30_000)
    window.traffic_panel.stop_requested.emit()
    qtbot.waitUntil(lambda: window.traffic_label.text().startswith("traffic: stopped"), timeout=10_000)
    sent = len(window.worker.rows())
    qtbot.waitUntil(lambda: all_ended(window), timeout=60_000)
    # Not "finished" (issue 58 #2): the run was cut short, and the label says by how much.
    never_sent = f"traffic: stopped early: {400 - sent:,} planned requests never sent"
    qtbot.waitUntil(lambda: window.traffic_label.text() == never_sent, timeout=10_000)
    assert sent < 400 and len(window.worker.rows()) == sent
    assert all(row.state == "finished" for row in window.worker.rows())


def test_abort_from_the_table_aborts_the_request(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    inject(window, 1, 10, 400, "chat")  # 400 output tokens: time to abort
    qtbot.waitUntil(lambda: any(row.state == "decoding" for row in window.worker.rows()), timeout=30_000)
    window.refresh_tables()
    window.requests.table.selectRow(0)
    window.requests.abort_button.click()
    qtbot.waitUntil(lambda: all_ended(window), timeout=30_000)
    row = window.worker.rows()[0]
    assert row.state == "aborted" and len(row.output_token_ids) < 400
    window.requests.show_detail(window.worker.row(row.request_id))
    assert "aborted (abort)" in window.requests.detail.toPlainText()


def fail_on_step_three(engine) -> None:
    """The engine's third execution raises, as a kernel with a bug would."""
    steps = itertools.count(1)
    execute = engine.executor.execute

    def failing(batch):
        if next(steps) == 3:
            raise RuntimeError("simulated kernel failure")
        return execute(batch)

    engine.executor.execute = failing


def test_a_failed_step_ends_its_requests_with_the_error_and_the_engine_goes_on(window, qtbot, tiny_config):
    """The engine core's policy (engine/core.py), the same as serve's: before it, the window dropped
    the engine at the first failed step and a run needed a reload."""
    load(window, qtbot, tiny_config)
    fail_on_step_three(window.worker._backend.engine)
    window.start_traffic(Scenario(name="t", traffic=TrafficProfile(arrival="poisson", rate=100.0, num_requests=20)))
    qtbot.waitUntil(lambda: "simulated kernel failure" in window.error_label.text(), timeout=30_000)
    assert "the engine goes on" in window.error_label.text()
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished", timeout=60_000)
    states = [row.state for row in window.worker.rows()]
    assert len(states) == 20 and 1 <= states.count("failed") < 20, states
    folder = window.worker.run_folder
    window.start_traffic(Scenario(name="t2", traffic=TrafficProfile(arrival="poisson", rate=100.0, num_requests=2)))
    qtbot.waitUntil(lambda: window.worker.run_folder != folder and all_ended(window), timeout=30_000)
    report = build_report(read_run_log(folder / RUN_LOG_NAME))
    assert report["incomplete_because"] == ["the engine step failed: RuntimeError: simulated kernel failure"]
    assert report["metrics"]["requests_failed"]["value"] == states.count("failed")


def test_a_broken_engine_is_shown_and_a_new_configuration_still_loads(window, qtbot, tiny_config, monkeypatch):
    """A failed step whose requests cannot even be ended leaves an engine nobody can trust: the
    window drops it and asks for a reload."""
    load(window, qtbot, tiny_config)
    engine = window.worker._backend.engine
    fail_on_step_three(engine)

    def broken_end(detail):
        raise RuntimeError("the scheduler's state is broken")

    monkeypatch.setattr(engine, "fail_unfinished", broken_end)
    window.start_traffic(Scenario(name="t", traffic=TrafficProfile(arrival="poisson", rate=100.0, num_requests=50)))
    qtbot.waitUntil(lambda: "simulated kernel failure" in window.error_label.text(), timeout=30_000)
    assert "ending its requests failed too" in window.error_label.text()
    assert "Apply a configuration to reload" in window.error_label.text()
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: stopped", timeout=5_000)
    log = read_run_log(window.worker.run_log_path)
    assert not log.complete and len(log.steps) == 2
    assert build_report(log)["incomplete_because"][0].startswith("the run log was not closed")
    window.engine_panel.set_config(tiny_config)
    window.engine_panel.apply_requested.emit(window.engine_panel.config())
    qtbot.waitUntil(lambda: window.error_label.text() == "" and "ready" in window.stage.text(), timeout=30_000)
    inject(window, 2, 10, 5, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 2, timeout=30_000)


def test_a_traffic_error_does_not_leave_the_status_line_saying_error(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    stage = window.stage.text()
    window.on_failed("traffic: rate: expected a positive number of requests/s, got 0")
    assert window.stage.text() == stage and "rate" in window.error_label.text()
    window.start_traffic(Scenario(name="t", traffic=TrafficProfile(arrival="constant", rate=50.0, num_requests=2)))
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 2, timeout=30_000)
    assert window.error_label.text() == "" and window.stage.text() == stage


def test_closing_during_a_run_stops_the_worker_thread(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    traffic = TrafficProfile(
        arrival="poisson",
        rate=100.0,
        num_requests=10_000,
        prompt_len=LengthDistribution(mean=30),
        output_len=LengthDistribution(mean=50),
    )
    window.start_traffic(Scenario(name="t", traffic=traffic))
    qtbot.waitUntil(lambda: len(window.worker.rows()) >= 10, timeout=30_000)
    window.close()
    assert not window.worker._thread.is_alive()  # close() joined it: the loop ended, nothing runs on


def test_ramp_traffic_takes_its_end_rate_and_duration_from_the_panel(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    panel = window.traffic_panel
    started = []
    panel.start_requested.connect(started.append)
    panel.arrival.setCurrentText("ramp")
    panel.duration.setValue(0)  # a ramp needs a duration: a message in the window, no exception
    panel.start_button.click()
    assert "traffic: end_rate, duration_s: a ramp needs" in window.error_label.text() and not started
    panel.rate.setValue(20)
    panel.end_rate.setValue(200)
    panel.duration.setValue(0.5)
    panel.num_requests.setValue(12)
    panel.output_len.mean.setValue(4)
    panel.start_button.click()
    assert (
        started[-1].traffic.arrival == "ramp"
        and started[-1].traffic.end_rate == 200
        and started[-1].traffic.duration_s == 0.5
    )
    qtbot.waitUntil(lambda: len(window.worker.rows()) == 12 and all_ended(window), timeout=30_000)


def test_controls_follow_the_traffic_state(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    assert window.traffic_label.text() == "traffic: idle"
    window.traffic_panel.pause_button.setChecked(True)
    traffic = TrafficProfile(
        arrival="poisson",
        rate=200.0,
        num_requests=6,
        prompt_len=LengthDistribution(mean=8),
        output_len=LengthDistribution(mean=4),
    )
    window.start_traffic(Scenario(name="t", traffic=traffic))
    qtbot.waitUntil(lambda: not window.traffic_panel.pause_button.isChecked(), timeout=10_000)  # a Start is not paused
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished", timeout=30_000)
    assert len(window.worker.rows()) == 6 and all_ended(window)


def test_a_second_start_is_a_new_run_with_its_own_time_axis(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    traffic = TrafficProfile(
        arrival="poisson",
        rate=100.0,
        num_requests=40,
        prompt_len=LengthDistribution(mean=12),
        output_len=LengthDistribution(mean=30),
    )
    window.start_traffic(Scenario(name="first", traffic=traffic))
    qtbot.waitUntil(
        lambda: window.worker.store is not None and window.worker.store.snapshot().steps["time_s"].size > 20,
        timeout=30_000,
    )
    first_store = window.worker.store
    assert window.worker.requests_in_flight() > 0
    window.start_traffic(Scenario(name="second", traffic=dataclasses.replace(traffic, num_requests=2)))
    qtbot.waitUntil(
        lambda: window.traffic_label.text() == "traffic: finished" and window.worker.store is not first_store,
        timeout=30_000,
    )
    times = window.worker.store.snapshot().steps["time_s"]
    assert times.min() >= 0 and (times[1:] >= times[:-1]).all()  # from zero, never backwards
    second_log = read_run_log(window.worker.run_log_path)
    assert second_log.header["scenario"]["name"] == "second"
    # The first run's requests in flight ended there, aborted: the second counts only its own two
    # (it used to count n = 10 for a 2-request run, on two clocks).
    assert window.worker.store.snapshot().requests["ttft_ms"].size == 2 and len(window.worker.rows()) == 2
    assert {ended["request_id"] for ended in second_log.requests} == {row.request_id for row in window.worker.rows()}
    assert (first_store.snapshot().requests["finished"] == 0).any()  # the first run's in flight ended there, aborted


@pytest.mark.parametrize("drop", [True, False, None])
def test_stop_offers_to_drop_the_waiting_requests(window, qtbot, tiny_config, drop):
    """Stop used to leave tens of thousands of queued requests to run for minutes."""
    load(window, qtbot, dataclasses.replace(tiny_config, max_num_seqs=2))
    asked = []
    window.confirm_drop_waiting = lambda waiting: asked.append(waiting) or drop
    inject(window, 60, 12, 40, "chat")
    qtbot.waitUntil(lambda: window.worker.requests_waiting() > 40, timeout=30_000)
    window.stop_traffic()
    assert asked and asked[0] > 40
    if drop is None:  # Cancel: nothing stopped
        qtbot.wait(100)
        assert window.traffic_label.text() != "traffic: stopped"
        window.worker.stop_traffic(drop_waiting=True)
    qtbot.waitUntil(lambda: all_ended(window), timeout=120_000)
    states = [row.state for row in window.worker.rows()]
    if drop is False:
        assert states.count("finished") == 60
    else:
        assert states.count("aborted") >= 40 and states.count("finished") + states.count("aborted") == 60


def test_an_events_only_preset_says_it_sends_no_background_traffic(window):
    """Issue 19 #15: for long-prompt-isolation the traffic panel kept showing Poisson, 2 req/s,
    100 requests, which that preset's timeline never uses."""
    from workbench.traffic.presets import load_preset

    panel = window.traffic_panel
    panel.show_scenario(load_preset("long-prompt-isolation"))
    assert panel.preset_label.isVisibleTo(panel)
    assert panel.preset_label.text() == (
        "Preset 'long-prompt-isolation': no background traffic, only the timeline below. The fields below are for "
        "Start. Engine: the preset's"  # no engine loaded before it
    )
    assert panel.events.isVisibleTo(panel)
    assert [
        (panel.events.item(row, 0).text(), panel.events.item(row, 1).text()) for row in range(panel.events.rowCount())
    ] == [("0", "inject 1 × 6000+16-token 'long'"), ("0", "inject 20 × 64+32-token 'chat'")]
    panel.show_scenario(load_preset("chat-steady"))
    assert panel.preset_label.text() == "Preset 'chat-steady': the fields below show its traffic. Engine: the preset's"
    assert not panel.events.isVisibleTo(panel)
    panel.show_scenario(load_preset("long-prompt-isolation"))
    panel.start_button.click()
    assert not panel.preset_label.isVisibleTo(panel) and not panel.events.isVisibleTo(panel)


@pytest.mark.parametrize(
    "arrival, shown",
    [
        ("poisson", {"rate"}),
        ("gamma", {"rate", "burstiness"}),
        ("ramp", {"rate", "end_rate"}),
        ("closed_loop", {"concurrency"}),
    ],
)
def test_the_traffic_panel_shows_only_what_the_arrival_process_reads(window, arrival, shown):
    panel = window.traffic_panel
    panel.arrival.setCurrentText(arrival)
    fields = {
        "rate": panel.rate,
        "end_rate": panel.end_rate,
        "burstiness": panel.burstiness,
        "concurrency": panel.concurrency,
    }
    assert {name for name, widget in fields.items() if widget.isVisibleTo(panel)} == shown


@pytest.mark.slow  # serves SmolLM2
def test_the_window_drives_a_server_and_says_what_it_does_not_expose(window, qtbot, server, tokenizer):
    """Issue 14: `workbench gui --server URL` (or a URL in the model field): live latency and server
    state from /metrics; the plots a server cannot feed say so instead of drawing zeros. (The
    `tokenizer` fixture reads the prompt tokenizer into the process cache first: parsing the GGUF
    vocabulary in the engine thread while the window repaints took over a minute on 2 cores.)"""

    window.load(EngineConfig(model=server))
    qtbot.waitUntil(lambda: window.stage.text().startswith("connected:"), timeout=60_000)
    assert window.stage.text() == f"connected: {server} (smollm2-135m)"
    plots = window.plots.plots
    assert plots["batch_composition"].plot.titleLabel.text == "Batch composition per step: not exposed by this backend"
    assert "not exposed by this backend" in window.memory.text.text()
    assert window.step_panel.title.text().startswith(f"step traces not exposed: {server}")
    traffic = TrafficProfile(
        arrival="poisson",
        rate=20.0,
        num_requests=6,
        prompt_len=LengthDistribution(mean=12),
        output_len=LengthDistribution(mean=8),
    )
    window.start_traffic(Scenario(name="remote", traffic=traffic))
    qtbot.waitUntil(lambda: window.worker.at_rest() and len(window.worker.rows()) == 6, timeout=120_000)
    window.refresh_plots()
    assert "n=6" in plots["latency"].plot.titleLabel.text
    assert plots["kv_occupancy"].used.getData()[0].size > 0  # scrapes of vllm:kv_cache_usage_perc
    assert all(row.state == "finished" and len(row.output_token_ids) == 8 for row in window.worker.rows()), [
        (row.state, len(row.output_token_ids)) for row in window.worker.rows()
    ]


def test_after_any_preset_start_runs_exactly_its_traffic_and_names_it(window):
    """The fields lost prefix-sharing's shared prefix, chat-burst's normal output lengths and
    uniform prompt ranges, and the variant was never named."""
    from workbench.traffic.presets import load_preset

    panel = window.traffic_panel
    entries = [panel.presets.item(row).text() for row in range(panel.presets.count())]
    assert "int4-vs-none / int4" in entries and "prefix-sharing / caching-on" in entries
    checked = 0
    for entry in entries:
        name, _, variant = entry.partition(" / ")
        preset = load_preset(name, variant=variant or None)
        if preset.traffic is None:
            continue
        panel.show_scenario(preset, entry)
        started = panel.scenario()
        assert started.traffic == preset.traffic, entry
        assert (started.name, started.slo, started.seed) == (entry, preset.slo, preset.seed)
        checked += 1
    assert checked >= 10
    panel.show_scenario(load_preset("int4-vs-none", variant="int4"), "int4-vs-none / int4")
    assert panel.preset_label.text().startswith("Preset 'int4-vs-none', variant 'int4': ")
    panel.num_requests.setValue(3)
    assert panel.scenario().name == "int4-vs-none / int4 (edited)"
