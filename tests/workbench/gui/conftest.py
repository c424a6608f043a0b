"""Qt fixtures: a main window on a temporary settings file, a tiny model config, and Qt's garbage
collected on the GUI thread after each test."""

from __future__ import annotations

import gc

import pytest

from engine import EngineConfig


@pytest.fixture(autouse=True)
def collect_qt_garbage_on_the_gui_thread():
    """Torn down after qtbot's: cyclic garbage holding a test's Qt objects is freed here, on the
    GUI thread. Left to the collector, it was once freed on the next test's engine thread, in the
    middle of loading a model, and destroying a QObject there deadlocked against the GUI thread
    (the suite hung in test_the_arms_wait_for_the_windows_own_traffic_to_end)."""
    yield
    gc.collect()


@pytest.fixture
def tiny_config(tiny_llama) -> EngineConfig:
    directory, _ = tiny_llama
    return EngineConfig(model=str(directory), device="cpu", num_kv_blocks=128, block_size=4, max_num_batched_tokens=64)


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_SETTINGS", str(tmp_path / "settings.ini"))
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    from workbench.gui.main_window import MainWindow

    main_window = MainWindow()
    # The questions a user answers in a dialog: yes to a reload or a new run, keep the queue at Stop.
    main_window.confirm_reload = lambda: True
    main_window.confirm_new_run = lambda in_flight, reload=False: True
    main_window.confirm_drop_waiting = lambda waiting: False
    qtbot.addWidget(main_window)
    main_window.show()
    yield main_window
    main_window.close()
