"""Qt fixtures: a main window on a temporary settings file, and a tiny model config."""

from __future__ import annotations

import pytest

from engine import EngineConfig


@pytest.fixture
def tiny_config(tiny_llama) -> EngineConfig:
    directory, _ = tiny_llama
    return EngineConfig(model=str(directory), device="cpu", num_kv_blocks=128, block_size=4, max_num_batched_tokens=64)


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_SETTINGS", str(tmp_path / "settings.ini"))
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
