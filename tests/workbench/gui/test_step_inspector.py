"""The step inspector in the window (pytest-qt, offscreen, a real engine thread): a click on a
plot selects the nearest step, ←/→ move it, the Step panel shows its four parts, the block map
shows the cache at that step, and a selected request's steps and rows are marked."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import QPointF, Qt
from PySide6.QtTest import QTest

from tests.workbench.gui.window_helpers import all_ended, inject, load


def click_plot_at(window, qtbot, name: str, seconds: float) -> None:
    plot = window.plots.plots[name].plot
    view = window.plots.layout_widget

    def on_screen():
        low, high = plot.vb.viewRange()[1]
        return view.mapFromScene(plot.vb.mapViewToScene(QPointF(seconds, (low + high) / 2)))

    qtbot.waitUntil(lambda: plot.vb.viewRange()[0][0] <= seconds <= plot.vb.viewRange()[0][1], timeout=5_000)
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=on_screen())


def test_clicking_a_plot_selects_a_step_and_the_arrows_and_block_map_follow(window, qtbot, tiny_config):
    window.resize(1480, 960)
    # A small cache, so that blocks are allocated, freed and reused over the run.
    load(window, qtbot, dataclasses.replace(tiny_config, num_kv_blocks=48))
    inject(window, 6, 24, 12, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 6, timeout=60_000)
    window.refresh_plots()
    traces, origin = window.worker.traces, window.worker.store.start_time
    first, last = traces.step_range()
    middle = traces.trace((first + last) // 2)

    click_plot_at(window, qtbot, "queue_depth", middle.time_s - origin)
    qtbot.waitUntil(lambda: window.session.selected_step is not None, timeout=5_000)
    chosen = window.session.selected_step
    assert abs(chosen - middle.step) <= 1  # the nearest step to where the click landed
    assert window.tabs.currentWidget() is window.step_panel
    assert window.step_panel.title.text().startswith(f"step {chosen} (steps {first}..{last} kept)")
    trace = traces.trace(chosen)
    computation = window.step_panel.tables["computation"]
    assert computation.rowCount() == len(trace.rows) + len(trace.held)
    assert {computation.item(row, 0).text() for row in range(len(trace.rows))} == {row.request_id for row in trace.rows}
    assert all(
        cursor.isVisible() and abs(cursor.value() - (trace.time_s - origin)) < 1e-9
        for cursor in window.plots.cursors.values()
    )

    window.activateWindow()
    window.step_panel.tables["caller"].setFocus()  # arrows in a table move the step, not the table's cell
    qtbot.waitUntil(lambda: window.step_panel.isAncestorOf(window.focusWidget()), timeout=5_000)
    QTest.keyClick(window.step_panel, Qt.Key.Key_Right)
    assert window.session.selected_step == chosen + 1
    QTest.keyClick(window.step_panel, Qt.Key.Key_Left)
    QTest.keyClick(window.step_panel, Qt.Key.Key_Left)
    assert window.session.selected_step == chosen - 1

    # The block map shows the cache at the selected step, and changes with it.
    window.tabs.setCurrentWidget(window.block_map)
    maps = {}
    for step in (first, chosen, last):
        window.select_step(step)
        maps[step] = window.block_map.owners.copy()
        assert window.block_map.caption.startswith(f"at step {step}")
        assert (maps[step] >= 0).sum() == traces.trace(step).kv_after.used_blocks - shared(maps[step])
    assert not (maps[first] == maps[chosen]).all()
    window.refresh_tables()  # pinned: the live refresh leaves the selected step's map alone
    assert (window.block_map.owners == maps[last]).all()
    # The last step's map is the live one: every request has ended and the cache holds only prefixes
    # (the live map used to keep the ended requests' blocks until the next run: the idle loop never refreshed it).
    window.step_panel.live.click()
    assert window.session.selected_step is None and not any(
        cursor.isVisible() for cursor in window.plots.cursors.values()
    )
    qtbot.waitUntil(lambda: (window.worker.block_map() == maps[last]).all(), timeout=5_000)


def shared(owners) -> int:
    return int((owners == -3).sum())


def test_selecting_a_request_marks_its_steps_its_rows_and_its_blocks(window, qtbot, tiny_config):
    load(window, qtbot, tiny_config)
    inject(window, 3, 16, 20, "chat")
    qtbot.waitUntil(
        lambda: (
            len(window.worker.rows()) == 3
            and window.worker.traces.step_range() is not None
            and window.worker.traces.step_range()[1] >= 6
        ),
        timeout=30_000,
    )
    window.worker.pause_traffic()
    qtbot.waitUntil(lambda: all_ended(window), timeout=30_000)
    window.refresh_tables()
    request_id = window.worker.rows()[1].request_id
    assert window.requests.select(request_id)
    detail = window.requests.detail.toPlainText()  # its causal history, as `workbench trace --request` prints it
    assert "step by step (the step traces):\nrequest " in detail and "admitted from waiting" in detail
    assert "finished: length (max_tokens (20))" in detail
    touched = window.worker.traces.steps_touching(request_id)
    assert len(touched) == 20  # a prefill that samples the first token, 19 decodes (the last one also frees its blocks)
    assert len(window.plots.request_steps.getData()[0]) == len(touched)
    window.select_step(touched[0][0])  # its prefill: its rows highlighted, its blocks outlined
    computation = window.step_panel.tables["computation"]
    marked = [
        computation.item(row, 0).text()
        for row in range(computation.rowCount())
        if computation.item(row, 0).background().color().name() == "#3d5a80"
    ]
    assert marked == [request_id]
    assert window.block_map.highlighted == set(window.worker.traces.replay_at(touched[0][0]).blocks_of(request_id))
    assert len(window.block_map.highlighted) == 4  # 16 prompt tokens in blocks of 4


def test_an_opened_run_is_inspected_from_its_log(window, qtbot, tiny_llama, tmp_path):
    from tests.workbench.tiny_runs import tiny_scenario
    from workbench.bench.headless import run_headless

    directory, _ = tiny_llama
    run_headless(tiny_scenario(directory, num_kv_blocks=24), tmp_path)  # small enough to preempt
    window.open_run(str(tmp_path))
    traces, origin = window._trace_source()
    first, last = traces.step_range()
    preempting = next(step for step in range(first, last + 1) if traces.trace(step).preemptions)
    window.select_time(traces.trace(preempting).time_s - origin)
    assert window.session.selected_step == preempting
    persisted = window.step_panel.tables["persisted"]
    changes = [persisted.item(row, 1).text() for row in range(persisted.rowCount())]
    assert "preempted" in changes and "released" in changes
    window.select_step(last)  # a fresh engine: replayed from an empty cache, the run's end holds no request's block
    assert (window.block_map.owners < 0).all()
    window.back_to_live()
    assert window.session.selected_step is None and window._trace_source()[0] is window.worker.traces


def test_an_engine_with_tracing_off_says_so_and_a_click_selects_nothing(window, qtbot, tiny_config):
    load(window, qtbot, dataclasses.replace(tiny_config, step_trace=False))
    assert window.step_panel.title.text() == "step traces not exposed: engine.step_trace is false in this configuration"
    inject(window, 2, 8, 4, "chat")
    qtbot.waitUntil(lambda: all_ended(window) and len(window.worker.rows()) == 2, timeout=30_000)
    window.select_time(0.0)
    assert window.worker.traces is None and window.session.selected_step is None
