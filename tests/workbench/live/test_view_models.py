"""The window's view models without a window (issue 60 #5): the status line's engine and the
Memory tab, read from a real engine's info (a simulated GPU: loaded in well under a second)."""

from __future__ import annotations

import dataclasses

import pytest

from engine import EngineConfig
from engine.execution.compile_cache import CompileProgress
from engine.simulation.catalogue import hardware_profile
from workbench.backends.loader import BackendLoader
from workbench.live.engine_status import LOAD_STAGES, EngineStatus, load_percent
from workbench.live.memory_view import memory_view


def loaded_info(model: str, **settings):
    backend, info = BackendLoader().load(EngineConfig(model=model, **settings), progress=lambda stage, fraction: None)
    backend.close()
    return info


@pytest.fixture(scope="module")
def simulated():
    return loaded_info("simulated:llama-3-8b@a100-80gb")


def test_a_loads_bar_moves_forward_across_stages_and_ignores_other_words():
    percents = [load_percent(stage, fraction) for stage in LOAD_STAGES for fraction in (0.0, 0.5)]
    assert percents == sorted(percents) and percents[0] == 0 and load_percent(LOAD_STAGES[-1], 1.0) == 100
    assert load_percent("ready", 1.0) is None and load_percent("load cancelled", 1.0) is None


def test_the_status_line_names_the_engine_and_redraws_only_while_it_changes(simulated):
    status = EngineStatus()
    assert status.after_failure(has_backend=False) == "no engine loaded: apply a configuration"
    status.info = simulated
    line = status.line()
    assert line.startswith("ready: simulated:llama-3-8b@a100-80gb (") and line.endswith("decode simulated)")
    assert not status.changed() and status.warming_up() == "" and status.plots_note(run_held=True) == ""
    assert status.after_failure(has_backend=True) == line


def test_while_the_graph_compiles_the_status_says_so_and_once_more_when_it_ends(simulated):
    status = EngineStatus()
    progress = [CompileProgress(12.0, 31.0)]
    status.info = dataclasses.replace(simulated, compile_progress=lambda: progress[0])
    assert status.changed()  # never drawn yet
    assert status.line().endswith(
        "— warming up, compiling the decode and prefill graphs: 12 s of about 31 s; "
        "until then steps run eagerly and slowly"
    )
    assert status.changed()  # its seconds move: redrawn on every refresh while it compiles
    assert status.plots_note(run_held=True) == "warming up, 12 s of about 31 s<br>the run starts when it is warm"
    progress[0] = None
    assert status.changed()  # the line still says "warming up": drawn once more
    status.line()
    assert not status.changed()


def test_a_simulated_gpus_memory_is_all_estimates_with_its_stated_error(simulated):
    view = memory_view(simulated)
    assert view.device == "a100-80gb (simulated)"
    assert view.device_total == hardware_profile("a100-80gb").memory_bytes
    assert view.lines and not any(line.measured for line in view.lines)
    assert [error.kind for error in view.simulated_errors] == ["throughput", "TTFT", "per-token latency"]
    assert view.timing == [error.phrase() for error in view.simulated_errors] and view.quality == ""


def test_a_group_of_gpus_shows_the_groups_memory_and_one_gpus_lines():
    view = memory_view(loaded_info("simulated:llama-3-8b@4xa100-80gb", tensor_parallel_size=4))
    assert view.device == "4xa100-80gb (simulated, 4 GPUs: TP 4 x PP 1)"
    assert view.device_total == 4 * hardware_profile("a100-80gb").memory_bytes and view.per_gpu
