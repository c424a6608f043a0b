"""The window with a real worker thread and a tiny model (pytest-qt, offscreen): loading, reloading,
cancelling and closing; the status line and the decode graph's compile; settings kept between
launches. Waits are on conditions, never on fixed sleeps."""

from __future__ import annotations

import dataclasses
import fcntl
import threading

import pytest
import torch

from engine import EngineConfig
from tests.workbench.gui.window_helpers import all_ended, inject, load
from workbench.analysis.report import build_report
from workbench.runs.run_log import read_run_log
from workbench.traffic.profile import LengthDistribution, TrafficProfile
from workbench.traffic.scenario import Scenario


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


def test_an_invalid_engine_configuration_is_a_message_not_an_exception(window, qtbot):
    window.engine_panel.model.setCurrentText("  ")
    applied = []
    window.engine_panel.apply_requested.connect(applied.append)
    window.engine_panel.apply_button.click()
    assert window.error_label.text().startswith("engine: model: expected") and not applied


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
