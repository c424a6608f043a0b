"""The window with a real worker thread and a tiny model (pytest-qt, offscreen). Waits are on
conditions, never on fixed sleeps."""

from __future__ import annotations

import dataclasses
import fcntl
import itertools
import json
import threading

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QPushButton

from engine import EngineConfig
from tests.workbench.gui.window_helpers import all_ended, inject, load, save_run
from tests.workbench.tiny_runs import tiny_scenario
from workbench.analysis.intervals import percentile_interval
from workbench.analysis.report import build_report
from workbench.bench.headless import run_headless
from workbench.quality.ledger import configuration_key, record
from workbench.runs.run_log import read_run_log
from workbench.runs.run_recorder import RUN_LOG_NAME
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import SLO, Scenario


def test_loading_drives_the_progress_bar_and_shows_memory(window, qtbot, tiny_config):
    seen = []
    window.worker.loading.connect(lambda stage, fraction: seen.append(stage))
    load(window, qtbot, tiny_config)
    assert {"read file", "allocate KV cache", "warm up", "ready"} <= set(seen)
    assert "ready" in window.stage.text() and "decode eager" in window.stage.text()
    # What quantization runs, and why: "auto" leaves a float safetensors model unquantized.
    assert ", none, " in window.stage.text() and "auto: float weights" in window.stage.toolTip()
    memory_text = window.memory.text.text()
    assert (
        "weights" in memory_text
        and "KV cache" in memory_text
        and "estimate" in memory_text
        and "measured" in memory_text
    )
    assert "exact: the file's weights in float32" in memory_text  # what the configuration costs in quality
    # Why the cache holds float32, and what bfloat16 would hold (an explicit int8 or int4 halved
    # the capacity against auto without a word).
    assert (
        f"KV cache</b>: {window.info.summary['kv_capacity_tokens']:,} tokens in float32 (kv_cache_dtype auto: the "
        "compute "
        "dtype); in bfloat16 (quantization auto on a CPU, or engine.kv_cache_dtype = bfloat16) the same bytes hold "
        "twice "
        "the tokens"
    ) in memory_text


def test_the_memory_tab_quotes_the_measured_quality_cost_of_a_quantized_configuration(window, qtbot, tiny_config):
    config = dataclasses.replace(tiny_config, quantization="int8")
    load(window, qtbot, config)
    assert "quality cost not measured on this machine: run workbench quality --quant int8" in window.memory.text.text()
    parts = window.info.summary["weight_parts"]  # the weights line is the int8 engine's own arithmetic
    text = window.memory.text.text()
    assert f"int8 (weights and scales) {parts['int8 (weights and scales)'] / 2**20:,.1f} MiB" in text
    assert f"float32 unquantized {parts['float32 unquantized'] / 2**20:,.1f} MiB" in text
    assert f"= {window.info.summary['weight_bytes'] / 2**20:,.1f} MiB" in text
    assert " MB" not in text  # issue 48 #14: the size column in MiB, its arithmetic in MB
    record(
        tiny_config.model,
        {
            configuration_key("int8", "float32", "float32"): {
                "perplexity_change_perc": 1.5,
                "kl_divergence_mean_nats": 0.01,
                "top1_agreement_perc": 93.0,
                "evaluated_tokens": 500,
            }
        },
    )
    load(window, qtbot, dataclasses.replace(config, block_size=8))  # a reload looks the ledger up again
    assert "int8 — vs the file's own weights: perplexity +1.50%" in window.memory.text.text()
    assert "(n = 500 tokens" in window.stage.toolTip()


def test_speculation_shows_in_the_batch_plot_and_each_requests_timeline(window, qtbot, tiny_config):
    """n-gram speculation on the tiny model (whose random weights repeat themselves, so lookup
    finds proposals): the batch plot draws proposed and accepted tokens and its title the
    acceptance, and a request's timeline the accepted length of each step."""
    load(window, qtbot, dataclasses.replace(tiny_config, speculative_method="ngram", num_speculative_tokens=3))
    inject(window, 4, 20, 48, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 4, timeout=60_000)
    window.refresh_plots()
    batch = window.plots.plots["batch_composition"]
    proposed = np.nansum(batch.speculation["proposed_tokens"].getData()[1])
    accepted = np.nansum(batch.speculation["accepted_tokens"].getData()[1])
    assert proposed > accepted > 0
    assert "% of proposed tokens accepted, " in batch.plot.titleLabel.text
    right = batch.plot.getAxis("right").labelText  # issue 77 #5: tokens drawn on an axis of sequences
    assert right == "decode seqs; proposed, accepted tokens"
    timelines = [text for row in window.worker.rows() for _, text in row.timeline]
    assert any(text.startswith("decoding; speculation: ") and "accepted per step" in text for text in timelines)


@pytest.mark.slow  # compiles the tiny model's decode graph
def test_the_status_line_follows_a_background_compile_to_the_compiled_path(window, qtbot, tiny_config, held_compile):
    torch._dynamo.reset()
    load(window, qtbot, dataclasses.replace(tiny_config, compile_decode="background"))
    stage = window.stage.text()  # with the time left if an earlier test compiled this graph, else without
    assert (
        "decode eager (compiling in the background)) — warming up, compiling the decode and prefill graphs: " in stage
    )
    assert stage.endswith("; until then steps run eagerly and slowly")
    window.refresh_plots()  # no step yet: the per-step plots say why instead of looking frozen
    titles = {name: plot.plot.title_text for name, plot in window.plots.plots.items()}
    assert titles["kv_occupancy"].startswith("KV-cache occupancy: no step yet<br>warming up, ")
    assert all("<br>warming up, " in titles[name] for name in ("queue_depth", "throughput", "batch_composition"))
    inject(window, 4, 20, 8, "chat")  # it serves meanwhile, eagerly
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 4, timeout=60_000)
    # Those steps are marked as the warm-up's, in the plots, the run log and the report.
    window.refresh_plots()
    shaded = window.plots.beside_compile
    assert all(region.isVisible() for region in shaded.values())
    steps = read_run_log(window.worker.run_log_path).steps
    assert steps and all(step["beside_compile"] for step in steps)
    assert shaded["kv_occupancy"].getRegion()[1] == pytest.approx(window.worker.store.snapshot().steps["time_s"][-1])
    caution = build_report(read_run_log(window.worker.run_log_path))["beside_compile"]
    assert caution.startswith(f"{len(steps)} of {len(steps)} steps (from ")
    assert "the latencies of the 4 of 4 requests that arrived by then measure the warm-up" in caution
    held_compile.set()
    qtbot.waitUntil(  # the decode graph, then the prefill halves
        lambda: "decode compiled)" in window.stage.text() and "warming up" not in window.stage.text(), timeout=600_000
    )
    assert window.status.warming_up() == ""
    inject(window, 2, 20, 8, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 6, timeout=60_000)
    steps = read_run_log(window.worker.run_log_path).steps
    assert not steps[-1]["beside_compile"] and steps[-1]["decode_compiled"]


@pytest.mark.slow  # compiles the tiny model's decode graph
def test_a_run_started_while_the_graph_compiles_waits_for_it_and_says_so(window, qtbot, tiny_config, held_compile):
    """A run started beside the compile measured eager steps (the README's screenshot showed
    chat-burst at goodput 0%): it is held, the status line and the plots say so with the time so
    far, and it starts once the engine is warm (its decode steps use the compiled graph; a batch
    the graph declines still runs eagerly)."""
    torch._dynamo.reset()
    load(window, qtbot, dataclasses.replace(tiny_config, compile_decode="background"))
    traffic = TrafficProfile(
        arrival="constant",
        rate=50.0,
        num_requests=4,
        prompt_len=LengthDistribution(kind="fixed", mean=20),
        output_len=LengthDistribution(kind="fixed", mean=8),
    )
    window.start_traffic(Scenario(name="t", traffic=traffic))
    qtbot.waitUntil(
        lambda: window.traffic_label.text() == "traffic: held until the decode and prefill graphs are compiled"
    )
    window.refresh_plots()
    title = window.plots.plots["kv_occupancy"].plot.title_text
    assert title.startswith("KV-cache occupancy: no step yet<br>warming up, ")
    assert title.endswith("<br>the run starts when it is warm")
    assert window.worker.requests_sent() == 0 and not window.worker.at_rest()
    held_compile.set()
    qtbot.waitUntil(lambda: "decode compiled)" in window.stage.text(), timeout=600_000)
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 4, timeout=60_000)
    steps = read_run_log(window.worker.run_log_path).steps
    assert any(step["decode_compiled"] for step in steps)


def test_the_status_line_elides_what_does_not_fit_and_shows_it_whole_in_its_tooltip(window, qtbot, tiny_config):
    """At 1,280 px the warm-up's words were cut at the window's edge, unseen."""
    load(window, qtbot, tiny_config)
    long = "ready: " + "a very long status, " * 40 + "and the end that matters"
    window.stage.setText(long)
    qtbot.waitUntil(lambda: window.stage.width() > 0)
    assert window.stage.width() < window.width() and window.stage.is_elided()
    assert window.stage.shown_text().endswith("…") and window.stage.toolTip().startswith(long)
    window.stage.setText("ready")
    assert not window.stage.is_elided() and window.stage.shown_text() == "ready"


def test_an_error_too_long_for_the_status_bar_is_elided_never_cut(window, qtbot):
    """A cut error changed its meaning: "max_num_seqs went back to 2" for 256."""
    assert not window.error_label.isVisible()  # takes no room while there is nothing to say
    long = "max_num_seqs: " + "an explanation that goes on, " * 30 + "so it went back to 256"
    window.on_failed(long)
    qtbot.waitUntil(lambda: window.error_label.isVisible() and window.error_label.width() > 0)
    assert window.error_label.geometry().right() <= window.statusBar().width()
    assert window.error_label.is_elided() and window.error_label.shown_text().endswith("…")
    assert window.error_label.toolTip() == window.error_label.text() and long in window.error_label.text()


def compile_threads() -> list:
    return [thread for thread in threading.enumerate() if thread.name == "decode and prefill compile"]


def test_reloading_and_closing_while_the_graph_compiles_stop_each_compile_first(
    window, qtbot, tiny_config, held_compile
):
    """Each reload closes the engine before building the next (a compile left running beside the
    next engine's construction corrupted the heap once), says so while it waits, and closing the
    window stops the last compile (it used to abort the process at exit)."""
    stages = []
    window.worker.loading.connect(lambda stage, fraction: stages.append(stage))
    config = dataclasses.replace(tiny_config, compile_decode="background")
    for max_num_seqs in (8, 9, 10):
        load(window, qtbot, dataclasses.replace(config, max_num_seqs=max_num_seqs))
        assert len(compile_threads()) == 1 and "compiling in the background" in window.stage.text()
        inject(window, 2, 10, 4, "chat")
        qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 2, timeout=30_000)
    assert stages.count("stopping the previous engine's background work (its compile)") == 2
    window.close()
    assert compile_threads() == []


def test_a_load_waiting_for_another_processs_build_says_so_and_cancel_ends_it(
    window, qtbot, tiny_config, tmp_path, monkeypatch
):
    """It sat at "warm up 75%" for over 5 minutes while another process held the build cache's
    lock, and Cancel load did nothing."""
    from kernels import cpu_operators

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # no build here yet
    monkeypatch.setattr(cpu_operators, "_state", {})
    directory = tmp_path / f"workbench_cpu_operators_{cpu_operators._machine_tag()}"
    directory.mkdir()
    with (directory / "build.flock").open("a") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another process building
        window.load(tiny_config)
        qtbot.waitUntil(lambda: "waiting" in window.stage.text(), timeout=60_000)
        assert f"for {directory / 'build.flock'}, held by another process building" in window.stage.text()
        assert window.cancel_button.isVisible()
        window.cancel_button.click()
        qtbot.waitUntil(lambda: window.error_label.text().startswith("load cancelled"), timeout=10_000)
    assert window.info is None and "loaded" not in cpu_operators._state


def test_opening_a_run_with_a_damaged_line_shows_the_rest_and_names_the_line(window, tmp_path, tiny_llama):
    """It used to end in a UnicodeDecodeError traceback from read_run_log."""
    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory), tmp_path)
    lines = (tmp_path / RUN_LOG_NAME).read_bytes().splitlines(keepends=True)
    lines[3] = b"\xff\xfe damaged on disk\n"
    (tmp_path / RUN_LOG_NAME).write_bytes(b"".join(lines))
    window.open_run(str(tmp_path))
    assert window.error_label.text() == ""
    # As report.json says: a skipped line makes the run incomplete, and the window says so too.
    assert window.runs.text.toPlainText().startswith(f"viewing {tmp_path} (incomplete: run.jsonl: 1 line skipped")
    assert "1 line skipped (line 4: not UTF-8 (byte 1))" in window.runs.text.toPlainText()


def why_source(window) -> str:
    """The run the Why tab explains, as its chart's title names it."""
    return window.why.plot.titleLabel.text.partition(":")[0]


def rewrite_header(folder, change) -> None:
    """Apply `change` to the run log's header line in place."""
    lines = (folder / RUN_LOG_NAME).read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    change(header)
    lines[0] = json.dumps(header) + "\n"
    (folder / RUN_LOG_NAME).write_text("".join(lines))


def test_a_run_whose_header_lacks_the_cache_size_opens_without_its_step_traces(window, tmp_path, tiny_llama):
    """It raised KeyError in past_traces, with no message, after the plots had switched to it."""
    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory), tmp_path)
    rewrite_header(tmp_path, lambda header: header["engine"].pop("kv_blocks"))
    window.open_run(str(tmp_path))
    assert window.error_label.text() == "" and window.session.viewing_past_run
    assert window.plots.source_label.text() == f"showing {tmp_path.name} (Back to live returns)"
    said = "its step traces cannot be shown: the header's engine.kv_blocks (the cache's size in blocks) is missing"
    assert said in window.runs.text.toPlainText()
    # all panes on the opened run
    assert window.session.opened.past.store is None and why_source(window) == tmp_path.name


def test_a_run_that_cannot_be_shown_switches_nothing(window, tmp_path, tiny_llama, monkeypatch):
    directory, _ = tiny_llama
    shown, broken = tmp_path / "shown", tmp_path / "broken"
    run_headless(tiny_scenario(directory), shown)
    run_headless(tiny_scenario(directory), broken)
    window.open_run(str(shown))
    monkeypatch.setattr("workbench.live.window_session.explain", lambda *_: {}["a field this log lacks"])
    window.open_run(str(broken))
    assert (
        "open run: " in window.error_label.text() and "its log cannot be shown (KeyError" in window.error_label.text()
    )
    assert window.plots.source_label.text() == "showing shown (Back to live returns)" and why_source(window) == "shown"


def test_back_to_live_leaves_no_pane_describing_the_opened_run(window, qtbot, tiny_config, tmp_path, tiny_llama):
    """The Runs text and the Why tab kept describing the opened run, and a click in the Why tab
    marked the live run's request of the same id."""
    from workbench.gui.why_view import NOTHING_EXPLAINED

    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory), tmp_path)
    load(window, qtbot, tiny_config)
    window.open_run(str(tmp_path))
    assert window.why.slowest.count() > 0 and window.runs.text.toPlainText().startswith("viewing")
    window.why.show_history(window.why.slowest.item(0).data(Qt.ItemDataRole.UserRole))
    window.back_to_live()
    assert window.runs.text.toPlainText() == "back to the live run"
    assert window.why.summary.text() == NOTHING_EXPLAINED and window.why.slowest.count() == 0
    assert window.why.explanation is None and window.session.selected_request is None


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


def test_injected_traffic_fills_the_plots_and_the_table(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    inject(window, 6, 20, 8, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 6, timeout=30_000)
    window.refresh_plots()
    window.refresh_tables()
    plots = window.plots.plots
    assert plots["kv_occupancy"].used.getData()[0].size > 0
    assert plots["queue_depth"].curves["running"].getData()[1].max() > 0
    assert plots["latency"].points["ttft"].getData()[0].size == 6
    # The run is whole: its percentiles get their intervals, as report.json computes them.
    ttft = window.worker.store.snapshot().requests["ttft_ms"]
    p99 = percentile_interval(ttft, 99)
    title = plots["latency"].plot.title_text
    # Six requests bound no p99 above: the title says "at least" its lower bound.
    assert "(n=6)<br>95%: p50 " in title and f"/ p99 ≥{p99.low:.0f} ms" in title and p99.high is None
    assert "order statistics of the n requests" in plots["latency"].plot.titleLabel.toolTip()
    assert window.minimumSizeHint().width() <= 1280  # the second line does not widen the window
    assert window.requests.model.rowCount() == 6
    goodput = window.plots.goodput
    assert goodput.text().startswith("goodput ") and "of n=6)" in goodput.text()
    assert goodput.toolTip().startswith(goodput.text())
    assert (
        goodput.sizeHint().width() < 200
        and "rejected, aborted and still unfinished requests count as misses" in goodput.toolTip()
    )


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


@pytest.mark.parametrize(
    "broken",
    [
        {"model": "/nowhere/model.gguf"},  # a mistyped path
        {"num_kv_blocks": 1 << 30},  # a cache this machine cannot hold
    ],
)
def test_a_failed_apply_keeps_the_working_engine(window, qtbot, tiny_config, broken):
    """It used to unload it: Start then said "no model is loaded yet" while the plots still
    showed the old engine as live."""
    load(window, qtbot, tiny_config)
    stage = window.stage.text()
    window.load(dataclasses.replace(tiny_config, **broken))
    qtbot.waitUntil(lambda: window.error_label.text() != "", timeout=30_000)
    assert window.stage.text() == stage and window.info.config == tiny_config  # still the working engine
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


@pytest.mark.slow  # loads the bundled model four times
def test_reloading_the_same_configuration_does_not_grow_the_process(window, qtbot):
    """The same configuration applied 5 times took the process from 2.7 to 5.4 GiB: glibc kept
    each replaced engine's freed memory. Now each load hands it back."""
    from engine.configuration.memory import process_resident_bytes

    resident = []
    for attempt in range(4):
        load(window, qtbot, EngineConfig(compile_decode="off", seed=attempt))  # a new config: a real reload each time
        resident.append(process_resident_bytes())
    assert resident[-1] - resident[0] < 300 << 20, [f"{size / 2**30:.2f} GiB" for size in resident]


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


def test_saved_run_can_be_opened_and_compared(window, qtbot, tiny_config, tmp_path):
    load(window, qtbot, tiny_config)
    traffic = TrafficProfile(
        arrival="poisson",
        rate=200.0,
        num_requests=8,
        prompt_len=LengthDistribution(mean=12),
        output_len=LengthDistribution(mean=6),
    )
    window.start_traffic(Scenario(name="t", traffic=traffic, slo=SLO(ttft_ms=5000)))
    qtbot.waitUntil(lambda: len(window.worker.rows()) == 8 and all_ended(window), timeout=30_000)
    first = save_run(window, qtbot, tmp_path / "first")
    assert (first / "latency.png").exists()
    report = json.loads((first / "report.json").read_text())
    assert (
        report["complete"] and report["metrics"]["requests_finished"]["value"] == 8
    )  # every request ended: a whole run
    assert read_run_log(first / "run.jsonl").complete
    window.open_run(str(first))
    assert window.session.viewing_past_run and "viewing" in window.runs.text.toPlainText()
    window.compare_runs(str(first), str(first))
    assert (
        "verdict: no decision: no intended gain or tolerated regression was declared" in window.runs.text.toPlainText()
    )


def test_save_run_leaves_the_window_responsive_and_says_each_stage(window, qtbot, tiny_config, tmp_path, monkeypatch):
    """Issue 77 #4: Save run… froze the window 18-31 s (a 2,000-request run). The save's thread
    here waits until the GUI thread has run a timer: were the save on the GUI thread, the timer
    could not fire and the wait would end by its timeout, unmet."""
    load(window, qtbot, tiny_config)
    traffic = TrafficProfile(arrival="poisson", rate=200.0, num_requests=4, prompt_len=LengthDistribution(mean=8))
    window.start_traffic(Scenario(name="t", traffic=traffic))
    qtbot.waitUntil(lambda: len(window.worker.rows()) == 4 and all_ended(window), timeout=30_000)
    gui_ran, seen = threading.Event(), {}
    write_copy = window.worker.save_log_copy

    def slow_copy(path):
        seen["waited"] = gui_ran.wait(timeout=30)
        write_copy(path)

    monkeypatch.setattr(window.worker, "save_log_copy", slow_copy)
    QTimer.singleShot(50, gui_ran.set)
    target = window.run_files.save_run(str(tmp_path / "saved"))
    assert window.runs.text.toPlainText().startswith(f"saving the run into {target}")
    qtbot.waitUntil(lambda: window.run_files.last_saved == target, timeout=60_000)
    assert seen["waited"] and (target / "latency.png").exists()
    text = window.runs.text.toPlainText()
    assert text.startswith(f"saved to {target} (run.jsonl, report.json, ") and "ttft_p50_ms" in text
    assert '"value"' not in text  # issue 77 #6: the summary lines, not the metrics' raw JSON


def forty_chats(output_len: LengthDistribution) -> TrafficProfile:
    """40 short prompts at 20 req/s, for a run saved while it goes."""
    return TrafficProfile(
        arrival="constant", rate=20.0, num_requests=40, prompt_len=LengthDistribution(mean=12), output_len=output_len
    )


def test_a_run_saved_mid_run_says_what_was_in_flight_and_what_was_still_to_send(window, qtbot, tiny_config, tmp_path):
    """It reported every planned request as "never sent", none unfinished, and a crash."""
    load(window, qtbot, tiny_config)
    traffic = forty_chats(LengthDistribution(kind="fixed", mean=400))  # long outputs: still running when saved
    window.start_traffic(Scenario(name="t", traffic=traffic))
    qtbot.waitUntil(lambda: window.worker.requests_in_flight() >= 3, timeout=30_000)
    saved = save_run(window, qtbot, tmp_path / "mid")
    report = json.loads((saved / "report.json").read_text())
    metrics = report["metrics"]
    sent = metrics["requests_finished"]["value"] + metrics["requests_unfinished"]["value"]
    assert metrics["requests_unfinished"]["value"] >= 3
    assert sent + metrics["requests_not_sent"]["value"] == 40 and report["requests_planned"] == 40
    assert "the run log was not closed (crash or interruption)" not in report["incomplete_because"]
    assert "saved while the run was going (requests in flight or still to send)" in report["incomplete_because"]
    assert any(
        reason.startswith("requests still in flight when the run ended: ") for reason in report["incomplete_because"]
    )
    window.worker.stop_traffic()


def test_the_window_and_report_json_give_the_same_figures_for_a_run_saved_mid_run_live_and_opened(
    window, qtbot, tiny_config, tmp_path, monkeypatch
):
    """The window's goodput counted ended requests (100.0% of n = 114) while the report counted
    arrived ones (77.0% of 139); the opened run said "(complete)" and its TTFT percentiles counted
    unfinished requests."""
    load(window, qtbot, tiny_config)
    traffic = forty_chats(LengthDistribution(kind="uniform", low=2, high=300))  # some end, some run on
    window.start_traffic(Scenario(name="t", traffic=traffic, slo=SLO(ttft_ms=5000)))
    finished = lambda: sum(row.state == "finished" for row in window.worker.rows())  # noqa: E731
    qtbot.waitUntil(lambda: finished() >= 3 and window.worker.requests_in_flight() >= 3, timeout=60_000)
    live = {}
    write = window.worker._write_log_copy

    def write_and_read_the_window(path):  # on the worker thread: no step comes between the two
        write(path)
        live["snapshot"] = window.worker.store.snapshot()

    monkeypatch.setattr(window.worker, "_write_log_copy", write_and_read_the_window)
    saved = save_run(window, qtbot, tmp_path / "mid")
    window.worker.stop_traffic()
    report = json.loads((saved / "report.json").read_text())
    metrics = report["metrics"]
    goodput = (metrics["requests_meeting_slo"]["value"], metrics["goodput_perc"]["n"])
    ttft = metrics["ttft_p50_ms"]
    assert not report["complete"] and goodput[1] > ttft["n"]  # requests in flight: arrived, not finished
    # What the window draws from the store at the moment the run was saved (its frames come at
    # 20 Hz, so the last one drawn may be a step behind the saved log).
    window.plots.update_from(live["snapshot"])

    def shown_as_in_the_report():
        snapshot = window.plots.snapshot
        assert snapshot.goodput == goodput
        assert window.plots.goodput.text() == (
            f"goodput {metrics['goodput_perc']['value']:.1f}% ({goodput[0]} of n={goodput[1]})"
        )
        values = snapshot.finished_latencies("ttft")
        assert values.size == ttft["n"] and float(np.percentile(values, 50)) == pytest.approx(ttft["value"])
        title = window.plots.latency.plot.title_text
        assert f"(n={ttft['n']}" in title and "<br>" not in title  # no intervals: the run is not whole

    shown_as_in_the_report()
    window.open_run(str(saved))
    opened = window.plots.snapshot
    assert opened.goodput == goodput and opened.finished_latencies("ttft").size == ttft["n"]
    assert (
        window.plots.goodput.text()
        == f"goodput {metrics['goodput_perc']['value']:.1f}% ({goodput[0]} of n={goodput[1]})"
    )
    assert (
        f"(n={ttft['n']}" in window.plots.latency.plot.title_text and "<br>" not in window.plots.latency.plot.title_text
    )
    status = window.runs.text.toPlainText()
    assert "(incomplete: " in status and "saved while the run was going" in status and "(complete)" not in status
    assert f"{ttft['n']} finished of {goodput[1]} arrived" in status


def test_runs_tab_errors_are_messages(window, qtbot, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "run.jsonl").write_text("not json at all\n")
    for folder, message in (
        (tmp_path / "empty", "no run log here"),
        (tmp_path / "missing", "no run log here"),
        (tmp_path / "garbage", "not a workbench run log"),
    ):
        window.open_run(str(folder))
        assert window.error_label.text().startswith("open run: ") and message in window.error_label.text(), folder
    assert not window.session.viewing_past_run
    assert save_run(window, qtbot, tmp_path / "nothing-yet") is None  # no engine loaded: no run log yet
    assert window.error_label.text().startswith("save run: ")


def test_settings_are_remembered_between_launches(qtbot, tmp_path, monkeypatch, tiny_config):
    monkeypatch.setenv("WORKBENCH_SETTINGS", str(tmp_path / "settings.ini"))
    from workbench.gui.main_window import MainWindow

    first = MainWindow()
    qtbot.addWidget(first)
    first.engine_panel.max_num_seqs.setValue(7)
    first.close()
    second = MainWindow()
    qtbot.addWidget(second)
    assert second.engine_panel.max_num_seqs.value() == 7
    second.close()


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


def test_an_invalid_engine_configuration_is_a_message_not_an_exception(window, qtbot):
    window.engine_panel.model.setCurrentText("  ")
    applied = []
    window.engine_panel.apply_requested.connect(applied.append)
    window.engine_panel.apply_button.click()
    assert window.error_label.text().startswith("engine: model: expected") and not applied


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


def test_plots_redraw_without_new_data(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    inject(window, 3, 10, 5, "chat")
    qtbot.waitUntil(lambda: len(window.worker.rows()) == 3 and all_ended(window), timeout=30_000)
    window.refresh_plots()
    latency = window.plots.plots["latency"]
    assert latency.points["tpot"].getData()[0] is None or latency.points["tpot"].getData()[0].size == 0
    window.plots.latency_mode.setCurrentIndex(2)  # TPOT, while the engine is idle
    assert latency.points["tpot"].getData()[0].size == 3 and "TPOT p50" in latency.plot.titleLabel.text
    bigger = dataclasses.replace(tiny_config, num_kv_blocks=256)
    load(window, qtbot, bigger)
    window.refresh_plots()  # nothing ran on the new engine: the plots still show its capacity
    assert "1,024 tokens" in window.plots.plots["kv_occupancy"].plot.titleLabel.text
    assert "no request finished yet" in latency.plot.titleLabel.text


def test_the_window_opens_no_larger_than_the_screen(window):
    available = window.screen().availableGeometry()
    assert window.width() <= available.width() and window.height() <= available.height()


def test_every_plots_data_area_is_at_least_120_pixels_tall_at_1280_by_800(window, qtbot):
    """They were 30-50 pixels: pyqtgraph's 30-pixel titles, legends of 39-52 and the tabs' 241."""
    from tests.workbench.gui.window_helpers import filled_store

    window.resize(1280, 800)
    qtbot.waitUntil(lambda: window.plots.height() >= 600, timeout=5_000)
    window.plots.update_from(filled_store(requests=5000).snapshot())
    qtbot.wait(50)
    heights = {name: plot.plot.vb.height() for name, plot in window.plots.plots.items()}
    assert min(heights.values()) >= 120, heights
    assert window.centre.isCollapsible(1) and window.tabs.height() > 0  # the tabs give way, and can be dragged shut


def test_no_plot_has_an_axis_below_zero_before_data(window, qtbot):
    from tests.workbench.gui.window_helpers import filled_store

    window.plots.update_from(filled_store(steps=0, requests=0).snapshot())
    qtbot.wait(50)
    for name, plot in window.plots.plots.items():
        assert plot.plot.vb.viewRange()[1][0] >= 0, name


def test_the_window_fits_800_by_600_with_its_status_bar_and_every_plot_reachable(window, qtbot):
    """Its minimum was 859x742: the status bar, where every error appears, and the plots' right
    column were off-screen."""
    from tests.workbench.gui.window_helpers import filled_store

    assert window.minimumSizeHint().width() <= 800 and window.minimumSizeHint().height() <= 600
    window.resize(800, 600)
    qtbot.waitUntil(lambda: window.width() == 800 and window.height() == 600, timeout=5_000)
    window.plots.update_from(filled_store(requests=5000).snapshot())
    qtbot.wait(50)
    status = window.statusBar().geometry()
    assert status.bottom() < window.height() and status.height() > 0
    # Two columns of plots need more than the centre has: they scroll sideways instead of being cut.
    needed = window.plots.layout_widget.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
    assert window.plots.layout_widget.width() >= needed > window.plots.scroll.viewport().width()
    assert window.plots.scroll.horizontalScrollBar().maximum() > 0
    # Issue 58 #5: the goodput line was cut before its n ("38 of n=4…"): where it does not fit
    # whole, it shows its short form, whole.
    goodput = window.plots.goodput
    assert "of n=5000)" in goodput.text() and goodput.shown_text() in (goodput.text(), "goodput 0.4%, n=5000")
    assert goodput.width() >= goodput.minimumSizeHint().width()


def test_the_memory_tab_shows_a_simulated_gpu_as_estimates_and_the_error_where_its_settings_stand(window, qtbot):
    from engine import EngineConfig
    from workbench.analysis.stated_error import UNCHECKED, Region, stated_error

    def load(config: EngineConfig, timeout_s: int = 30) -> None:
        window.load(config)  # a simulated one at real-time speed
        qtbot.waitUntil(
            lambda: (
                window.info is not None
                and (window.info.config.model, window.info.config.num_scheduler_steps)
                == (config.model, config.num_scheduler_steps)
            ),
            timeout=timeout_s * 1000,
        )

    # The defaults (auto: vLLM V1): one published throughput figure at these settings, no TTFT or
    # per-token one: the label gives the one and says the others are unchecked, no ± figure.
    load(EngineConfig(model="simulated:llama-2-7b@h100-80gb"))
    text = window.memory.text.text()
    assert "h100-80gb (simulated)" in text and "of 74.5 GiB" in text and "measured" not in text
    defaults = Region("vllm-0.8", tensor_parallel=False, multi_step=False, chunked_prefill=True)
    assert "<b>timing</b>" in text and stated_error(defaults, "TTFT").phrase() in text
    label = window.plots.simulated_error
    throughput = stated_error(defaults, "throughput").median_abs_perc
    assert stated_error(defaults, "TTFT").phrase().endswith(UNCHECKED)
    assert label.isVisible() and label.text() == (
        f"simulated (vllm-0.8; one GPU, single-step, chunked prefill, any load): throughput ±{throughput:.0f}%, "
        "TTFT unchecked, per-token latency unchecked against published runs"
    )
    # vLLM 0.6.0 as SGLang's comparison ran it (multi-step 10, whole prefills): each kind's error
    # over those published runs, its sources in the tooltip.
    published = Region("vllm-0.6.0", tensor_parallel=False, multi_step=True, chunked_prefill=False)
    load(
        EngineConfig(
            model="simulated:llama-2-7b@h100-80gb",
            serving_stack="vllm-0.6.0",
            num_scheduler_steps=10,
            enable_chunked_prefill=False,
        )
    )
    ttft = stated_error(published, "TTFT").median_abs_perc
    assert f"TTFT ±{ttft:.0f}%" in label.text() and "simulated (vllm-0.6.0; one GPU, multi-step" in label.text()
    assert stated_error(published, "throughput").phrase() in label.toolTip()
    for width in (1280, 800):  # never cut short of its short form, even on an 800-pixel screen
        window.resize(width, 600)
        qtbot.waitUntil(lambda: label.width() >= label.minimumSizeHint().width(), timeout=5_000)
        assert window.width() == width
    load(EngineConfig(model="simulated:llama-2-7b@h100-80gb"))  # and back, at 800 px
    qtbot.waitUntil(lambda: label.width() >= label.minimumSizeHint().width(), timeout=5_000)
    assert "TTFT unchecked" in label.text()
    # Settings no published run used at all (vLLM 0.6.0 multi-step with chunked prefill): no figure of any kind.
    load(EngineConfig(model="simulated:llama-2-7b@h100-80gb", serving_stack="vllm-0.6.0", num_scheduler_steps=2))
    assert label.text().endswith(UNCHECKED) and "±" not in label.text()
    load(EngineConfig(model="smollm2-135m", compile_decode="off"), timeout_s=60)  # real: its times are measured
    assert window.plots.simulated_error.isHidden() and window.plots.simulated_error.text() == ""


def test_a_model_split_across_four_simulated_gpus_loads_and_shows_the_groups_memory(window, qtbot):
    """Issue 50 #1: the Memory tab asked the catalogue for "4xh100-80gb", which names no GPU."""
    from engine import EngineConfig

    window.load(EngineConfig(model="simulated:llama-3-70b@4xh100-80gb", tensor_parallel_size=4, max_model_len=2048))
    qtbot.waitUntil(lambda: window.info is not None and "llama-3-70b" in window.info.config.model, timeout=30_000)
    text = window.memory.text.text()
    assert "4xh100-80gb (simulated, 4 GPUs: TP 4 x PP 1)" in text and "of 298.0 GiB" in text
    # One GPU's lines, each in GB as its arithmetic: a quarter of Llama-3-70B's 141.11 GB.
    assert "<b>each GPU</b>" in text and "35.28 GB</td>" in text and "/ (4 x 1 GPUs) = 35.28 GB" in text
    # Issue 58 #4: the KV line said 40.06 GB, what could fit beside a 5% allowance, where the engine
    # holds its capacity in tokens x one GPU's 80 KiB a token, within 90% of the GPU's 80 GB.
    held = window.info.summary["kv_capacity_tokens"] * 81_920 / 1e9
    assert f"x 80 KiB a token on one GPU = {held:.2f} GB" in text and 35.5 < held < 37
    assert "10% of 80.0 GB left unused" in text and "runtime overhead" not in text
    assert window.error_label.text() == ""


def test_choosing_a_model_on_four_gpus_splits_it_across_them(window):
    panel = window.engine_panel
    assert panel.model.findText("simulated:llama-3-70b@4xh100-80gb") >= 0  # offered in the list
    panel.model.setCurrentText("simulated:llama-3-70b@4xh100-80gb")
    assert (panel.config().tensor_parallel_size, panel.config().pipeline_parallel_size) == (4, 1)
    panel.pipeline_parallel.setValue(2)
    panel.tensor_parallel.setValue(2)  # a split that covers the four: kept
    panel.model.setCurrentText("simulated:llama-2-70b@4xh100-80gb")
    assert (panel.config().tensor_parallel_size, panel.config().pipeline_parallel_size) == (2, 2)
    panel.model.setCurrentText("simulated:llama-3-8b@h100-80gb")  # one GPU again
    assert (panel.config().tensor_parallel_size, panel.config().pipeline_parallel_size) == (1, 1)


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


def test_start_after_opening_a_run_shows_the_new_run_and_says_which_run_the_plots_show(
    window, qtbot, tiny_config, tmp_path, tiny_llama
):
    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory), tmp_path)
    load(window, qtbot, tiny_config)
    window.open_run(str(tmp_path))
    assert window.plots.source_label.text() == f"showing {tmp_path.name} (Back to live returns)"
    window.start_traffic(Scenario(name="t", traffic=TrafficProfile(arrival="constant", rate=50.0, num_requests=2)))
    assert not window.session.viewing_past_run and window.plots.source_label.text() == ""
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished", timeout=30_000)
    window.refresh_plots()
    assert window.plots.snapshot.requests["ttft_ms"].size == 2  # the live run, not the opened one


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


def test_every_control_is_whole_and_inside_its_column_at_1280_by_800(window, qtbot):
    """Issue 19 #15: the controls column was narrower than its contents (the model name cut,
    "Apply and l…", Stop behind a horizontal scrollbar). Scrolling down is fine; sideways is not."""
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QAbstractButton, QAbstractSpinBox, QComboBox, QLineEdit, QScrollArea

    window.resize(1280, 800)
    qtbot.wait(50)
    scroll = window.main_splitter.widget(0)
    assert isinstance(scroll, QScrollArea)
    viewport = scroll.viewport()
    controls = [
        widget
        for kind in (QAbstractButton, QComboBox, QLineEdit, QAbstractSpinBox)
        for widget in scroll.widget().findChildren(kind)
        if widget.isVisibleTo(scroll.widget())
    ]
    assert len(controls) > 20
    for widget in controls:
        left = widget.mapTo(viewport, QPoint(0, 0)).x()
        name = widget.text() if hasattr(widget, "text") else widget.objectName() or type(widget).__name__
        assert 0 <= left and left + widget.width() <= viewport.width(), f"{name!r} reaches past the column"
        if isinstance(widget, QAbstractButton):
            assert widget.width() >= widget.sizeHint().width(), f"button {name!r} is cut"
    assert not scroll.horizontalScrollBar().isVisible()
    # The plots, with every title and legend filled in, fit the centre side by side.
    from PySide6.QtCore import Qt

    from tests.workbench.gui.window_helpers import filled_store

    for whole in (False, True):  # a whole run's latency title has a second line, of intervals
        window.plots.update_from(filled_store(requests=5000).snapshot(), whole=whole)
        qtbot.wait(50)
        needed = window.plots.layout_widget.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
        assert needed <= window.plots.layout_widget.viewport().width(), (whole, window.plots.latency.plot.title_text)


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


def test_the_memory_tab_scrolls_rather_than_hiding_lines(window, qtbot, tiny_config):
    """Issue 19 #15: in a short tab only the weights line was visible."""
    from PySide6.QtWidgets import QScrollArea

    load(window, qtbot, tiny_config)
    text = window.memory.text
    assert isinstance(text.parentWidget().parentWidget(), QScrollArea)
    assert all(f"■</span> {name}</td>" in text.text() for name in ("weights", "KV cache", "activations", "other"))


@pytest.mark.slow  # serves SmolLM2
def test_the_window_drives_a_server_and_says_what_it_does_not_expose(window, qtbot, server, tokenizer):
    """Issue 14: `workbench gui --server URL` (or a URL in the model field): live latency and server
    state from /metrics; the plots a server cannot feed say so instead of drawing zeros. (The
    `tokenizer` fixture reads the prompt tokenizer into the process cache first: parsing the GGUF
    vocabulary in the engine thread while the window repaints took over a minute on 2 cores.)"""
    from engine import EngineConfig

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


def test_hovering_a_latency_point_names_its_request_and_clicking_selects_its_row(window, qtbot, tiny_config):
    from PySide6.QtCore import QPointF, Qt
    from PySide6.QtTest import QTest

    window.resize(1480, 960)  # the plots side by side in full (an earlier test may leave an 800-pixel screen)
    load(window, qtbot, tiny_config)
    inject(window, 3, 8, 4, "chat")
    inject(window, 1, 40, 30, "long")  # ends last, far from the others
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 4, timeout=30_000)
    window.tabs.setCurrentWidget(window.memory)
    window.plots.latency_mode.setCurrentIndex(1)  # e2e, where the long request stands highest
    window.refresh_plots()
    latency = window.plots.latency
    x, y = latency.points["e2e"].getData()
    target = int(y.argmax())  # the long request's e2e point
    view = window.plots.layout_widget

    def on_screen():  # where the point is drawn, once the plot has ranged its axes to the data
        return view.mapFromScene(latency.plot.vb.mapViewToScene(QPointF(x[target], y[target])))

    seen = []

    def settled():  # on screen, in range, and where it was at the last look (the window lays out after a frame)
        seen.append(on_screen())
        return (
            len(seen) > 1
            and seen[-1] == seen[-2]
            and view.viewport().rect().contains(seen[-1])
            and latency.plot.vb.viewRect().contains(x[target], y[target])
        )

    qtbot.waitUntil(settled)
    where = on_screen()
    QTest.mouseMove(view.viewport(), where)
    qtbot.waitUntil(lambda: latency.plot.vb.toolTip().startswith("long-3 (long)"), timeout=5_000)
    tip = latency.plot.vb.toolTip()
    assert "prompt 40 tokens, output 30 tokens" in tip and "TTFT" in tip and "e2e" in tip
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=where)
    qtbot.waitUntil(lambda: window.requests.selected_id() == "long-3", timeout=5_000)
    assert window.tabs.currentWidget() is window.requests
    assert window.requests.detail.toPlainText().startswith("long-3 (long) — finished")


def test_a_bench_run_is_drawn_faded_under_the_live_plots_as_a_baseline(window, qtbot, tiny_config, tmp_path):
    from workbench.cli import main

    preset = tmp_path / "baseline.toml"
    preset.write_text(f"""
name = "baseline"
description = "Five chats on the tiny model."
[engine]
model = "{tiny_config.model}"
device = "cpu"
num_kv_blocks = 128
block_size = 4
[traffic]
arrival = "constant"
rate = 50.0
num_requests = 5
prompt_len = {{ kind = "fixed", mean = 12 }}
output_len = {{ kind = "fixed", mean = 6 }}
[slo]
ttft_ms = 1000
""")
    assert main(["bench", "--preset", str(preset), "--out", str(tmp_path / "run"), "--no-plots"]) == 0
    load(window, qtbot, tiny_config)
    window.run_files.open_baseline(str(tmp_path / "run"))
    latency = window.plots.latency.plot
    ghosts = [item for item in latency.vb.addedItems if item.zValue() == -10]
    ghost_points = [item for item in ghosts if item.opts["symbol"] and len(item.getData()[0]) == 5]
    assert len(ghost_points) == 1  # the TTFT of the 5 baseline requests
    assert all(item not in [entry[0] for entry in latency.legend.items] for item in ghosts)
    assert (
        window.plots.baseline_label.text().startswith("baseline (faded): run, TTFT p50")
        and "(n=5)" in window.plots.baseline_label.text()
    )
    assert any(item.zValue() == -10 for item in window.plots.plots["kv_occupancy"].plot.vb.addedItems)
    inject(window, 3, 8, 4, "chat")  # live requests draw over it
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 3, timeout=30_000)
    window.refresh_plots()
    assert window.plots.latency.points["ttft"].getData()[0].size == 3 and "(n=3)" in latency.titleLabel.text
    window.run_files.clear_baseline()
    assert (
        not [item for item in latency.vb.addedItems if item.zValue() == -10]
        and window.plots.baseline_label.text() == ""
    )


def test_each_plot_exports_to_png_svg_and_csv(window, qtbot, tiny_config, tmp_path):
    from PySide6.QtGui import QImage

    load(window, qtbot, tiny_config)
    inject(window, 4, 8, 4, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 4, timeout=30_000)
    window.refresh_plots()
    written = window.run_files.export_plots(str(tmp_path))
    assert len(written) == 15 and all(path.stat().st_size > 0 for path in written)
    assert not QImage(str(tmp_path / "latency.png")).isNull()
    assert "<svg" in (tmp_path / "queue_depth.svg").read_text()
    header, *rows = (tmp_path / "latency.csv").read_text().splitlines()
    # One row per request; e2e's and TPOT's columns are empty while TTFT is shown.
    assert header.startswith("TTFT_x,TTFT_y,E2E_x,E2E_y,TPOT_x,TPOT_y,p50 of last 100_x") and len(rows) == 4
    ttft_x = sorted(float(row.split(",")[0]) for row in rows)
    assert ttft_x == pytest.approx(sorted(window.plots.latency.points["ttft"].getData()[0].tolist()))
    assert window.run_files.export_plots(str(tmp_path / "missing" / "folder")) == []
    assert "export plots:" in window.error_label.text()


def test_time_axes_show_the_whole_run_or_follow_its_last_seconds(qtbot):
    import numpy as np

    from engine.requests.metrics import RequestMetrics, StepStats
    from workbench.gui.plots_view import PlotsView
    from workbench.live.metrics_store import MetricsStore

    store = MetricsStore(0.0, kv_capacity_tokens=1024)
    for index in range(600):  # a 60-second run
        store.add_step(StepStats(index * 0.1 + 0.1, 0.1, 8, 4, 4, 10, 100, 0, 0, 0, 4, 0, 0, 0, 0))
    store.add_request(RequestMetrics(1.0, 10, 1.0, 1.2, 2.0, [1.2, 2.0], finish_reason="length"), "chat", "chat-0")
    store.add_request(
        RequestMetrics(58.0, 10, 58.0, 58.5, 59.0, [58.5, 59.0], finish_reason="length"), "chat", "chat-1"
    )
    view = PlotsView()
    qtbot.addWidget(view)
    view.resize(1200, 800)
    view.show()
    view.update_from(store.snapshot())
    for plot in view.plots.values():
        plot.plot.vb.updateAutoRange()
    whole = {name: plot.plot.vb.viewRange()[0] for name, plot in view.plots.items()}
    assert all(low <= 1.0 and high >= 59.0 for low, high in whole.values()), whole  # the first request stays in view
    view.follow_seconds.setValue(10)
    view.follow.setChecked(True)
    assert all(np.allclose(plot.plot.vb.viewRange()[0], [50.0, 60.0]) for plot in view.plots.values())
    view.follow.setChecked(False)
    assert all(
        np.allclose(plot.plot.vb.viewRange()[0], [0.0, 65.0]) for plot in view.plots.values()
    )  # a step past 60 s
    # Zooming one plot zooms them all, and the lines are drawn at full resolution within it.
    throughput = view.plots["throughput"].plot.vb
    throughput.setXRange(10.05, 12.05, padding=0)
    throughput.sigRangeChangedManually.emit([True, False])
    assert all(np.allclose(plot.plot.vb.viewRange()[0], [10.05, 12.05]) for plot in view.plots.values())
    x, _ = view.plots["kv_occupancy"].used.getData()
    # Every step inside and one either side; the line starts where its first step started.
    assert x.size == 23 and x[0] == pytest.approx(x[1] - 0.1) and x[1] < 10.05 < x[2] and x[-2] < 12.05 < x[-1]
    store.add_step(StepStats(60.1, 0.1, 8, 4, 4, 10, 100, 0, 0, 0, 4, 0, 0, 0, 0))
    view.update_from(store.snapshot())
    assert np.allclose(throughput.viewRange()[0], [10.05, 12.05])  # new data leaves the user's zoom alone
    throughput.enableAutoRange(x=True)  # pyqtgraph's "A" button: the whole run again
    view.redraw()
    assert all(np.allclose(plot.plot.vb.viewRange()[0], [0.0, 65.0]) for plot in view.plots.values())
    assert view.plots["latency"].plot.vb.viewRange()[0][0] <= 1.0
    # Zooming while following stops following and keeps the zoom (it once jumped to the whole run).
    view.follow.setChecked(True)
    throughput.setXRange(52.05, 55.05, padding=0)
    throughput.sigRangeChangedManually.emit([True, False])
    assert not view.follow.isChecked() and view.zoomed
    assert all(np.allclose(plot.plot.vb.viewRange()[0], [52.05, 55.05]) for plot in view.plots.values())


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


def test_of_several_loads_the_latest_wins_and_only_its_traffic_runs(window, qtbot, tiny_config):
    """Double-clicking three presets during a load queued four full loads, each with its traffic."""
    loaded, progress = [], []
    window.worker.loaded.connect(lambda info: loaded.append(info.config))
    window.worker.loading.connect(lambda stage, fraction: progress.append(window.progress.value()))
    configs = [dataclasses.replace(tiny_config, max_num_seqs=count) for count in (5, 6, 7)]
    for number, config in enumerate(configs):
        window.load(config)
        window.start_traffic(
            Scenario(name=f"run {number}", traffic=TrafficProfile(arrival="constant", rate=50.0, num_requests=2))
        )
    qtbot.waitUntil(lambda: window.traffic_label.text() == "traffic: finished", timeout=60_000)
    assert loaded == [configs[-1]]
    assert read_run_log(window.worker.run_log_path).header["scenario"]["name"] == "run 2"
    assert progress == sorted(progress) and progress[-1] == 100  # one bar for the whole load, never restarting


def test_cancel_stops_a_load_and_keeps_the_engine_loaded_before(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    window.load(dataclasses.replace(tiny_config, max_num_seqs=3))
    window.cancel_button.click()
    qtbot.waitUntil(lambda: "load cancelled" in window.error_label.text(), timeout=30_000)
    assert window.error_label.text() == "load cancelled: the engine loaded before keeps serving"
    assert window.info.config == tiny_config and window.stage.text().startswith("ready: ")
    assert not window.cancel_button.isVisibleTo(window)
    inject(window, 2, 10, 4, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 2, timeout=30_000)


def test_closing_during_a_load_stops_it_and_says_where_runs_are_kept(qtbot, tmp_path, monkeypatch, tiny_config):
    monkeypatch.setenv("WORKBENCH_SETTINGS", str(tmp_path / "settings.ini"))
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    from workbench.gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    assert window.worker.runs_dir == tmp_path / "runs"
    assert f"under {tmp_path / 'runs'}" in window.runs.text.toPlainText()
    window.load(tiny_config)
    window.close()
    assert not window.worker._thread.is_alive() and not window.worker.has_backend()  # stopped at its next stage
    # A load sends nothing: no empty run folder is left behind.
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_compare_runs_shows_the_comparison_in_the_runs_tab(window, tmp_path, tiny_llama):
    """After the Step tab was inserted, Compare runs… switched to the Memory tab by its old index."""
    directory, _ = tiny_llama
    for name in ("a", "b"):
        run_headless(tiny_scenario(directory), tmp_path / name)
    window.compare_runs(str(tmp_path / "a"), str(tmp_path / "b"))
    assert window.tabs.currentWidget() is window.runs
    assert "verdict:" in window.runs.text.toPlainText()


def test_gui_names_a_variant_either_way_and_refuses_an_unknown_one(capsys):
    from workbench.cli import main

    assert main(["gui", "--preset", "int4-vs-none / int8"]) == 2
    assert "no variant 'int8'; variants are none, int4" in capsys.readouterr().err
    assert main(["gui", "--preset", "int4-vs-none", "--variant", "int2"]) == 2
    assert "no variant 'int2'; variants are none, int4" in capsys.readouterr().err
    assert main(["gui", "--preset", "int4-vs-none", "--server", "http://127.0.0.1:9"]) == 2
    assert (
        "--server with int4-vs-none, a preset of variants: choose one with --variant (none, int4)"
        in capsys.readouterr().err
    )


def test_warm_up_titles_leave_both_columns_of_plots_in_view_at_1280_and_1480(window, qtbot):
    """Issue 58 #5: "no step yet, warming up, ..." in one line pushed two plots behind a sideways
    scrollbar at 1280 and 1480 px."""
    from tests.workbench.gui.window_helpers import filled_store

    waiting = "warming up, 12 min 34 s so far<br>the run starts when it is warm"  # as refresh_plots says it
    for width in (1280, 1480):
        window.resize(width, 800)
        qtbot.waitUntil(lambda: window.width() == width, timeout=5_000)  # noqa: B023
        window.plots.update_from(filled_store(steps=0, requests=0).snapshot(), waiting=waiting)
        assert "no step yet" in window.plots.plots["kv_occupancy"].plot.title_text
        # Once the plots have laid out their new titles (a busy machine takes a few frames).
        qtbot.waitUntil(lambda: window.plots.scroll.horizontalScrollBar().maximum() == 0, timeout=5_000)


def test_the_window_opens_with_its_frame_and_status_bar_on_the_screen(window, qtbot):
    """Issue 58 #5: sized to the screen's whole available height, the window manager's title bar
    pushed the status bar below an 800-pixel screen. (Qt's offscreen platform frames windows too:
    a 22-pixel title bar.)"""
    available = window.screen().availableGeometry()
    window.show()
    qtbot.waitExposed(window)
    frame = window.frameGeometry()
    assert frame.height() > window.height()  # there is a frame to allow for
    assert window.height() + (frame.height() - window.height()) <= available.height()
    status = window.statusBar()
    assert status.mapTo(window, status.rect().bottomLeft()).y() < window.height()


@pytest.mark.parametrize("tab, whole", [("KV block map", False), ("Runs", False), ("Runs", True)])
def test_every_plots_data_area_stays_readable_at_800_by_600_with_a_tab_open(window, qtbot, tab, whole):
    """Issue 58 #5: at 800x600 with a tab open the data areas were 20-45 pixels. The plots keep
    PLOT_MIN_DATA_HEIGHT each and scroll up and down where the centre is shorter than that.
    Issue 77 #6: a whole run's latency title takes a second line, and the plot kept 76 pixels (the
    rows' extra room was spread alike, not by what each row's plots need)."""
    from tests.workbench.gui.window_helpers import filled_store
    from workbench.gui.plots_view import PLOT_MIN_DATA_HEIGHT

    window.resize(800, 600)
    qtbot.waitUntil(lambda: window.width() == 800 and window.height() == 600, timeout=5_000)
    window.plots.update_from(filled_store(requests=5000).snapshot(), whole=whole)
    window.tabs.setCurrentIndex([window.tabs.tabText(i) for i in range(window.tabs.count())].index(tab))
    window.tabs.tabBarClicked.emit(window.tabs.currentIndex())
    qtbot.waitUntil(lambda: window.tabs.height() >= 120, timeout=5_000)
    qtbot.wait(50)
    heights = {name: plot.plot.vb.height() for name, plot in window.plots.plots.items()}
    assert min(heights.values()) >= PLOT_MIN_DATA_HEIGHT - 1, heights  # less a fraction of a pixel
    scroll = window.plots.scroll
    assert scroll.verticalScrollBar().maximum() > 0  # what does not fit is reached by scrolling
    status = window.statusBar().geometry()
    assert status.bottom() < window.height() and status.height() > 0
