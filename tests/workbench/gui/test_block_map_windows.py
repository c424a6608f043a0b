"""The block map on a model with sliding-window layers (Gemma 3 270M's shape, simulated): the
backend marks the blocks the window groups hold, and the view hatches them."""

from __future__ import annotations

import numpy as np

from engine import EngineConfig, LLMEngine, SamplingParams
from workbench.backends.local import LocalBackend
from workbench.backends.protocol import BLOCK_FREE
from workbench.gui.block_map import MIN_CELL_PX, BlockMapView


def test_the_block_map_marks_and_hatches_the_window_groups_blocks(qtbot):
    engine = LLMEngine(
        EngineConfig(
            model="simulated:gemma3-270m@a100-80gb", num_kv_blocks=800, max_model_len=2048, long_prompt_threshold=0
        )
    )
    request_id = engine.add_request([3] * 1_000, SamplingParams(max_tokens=4, ignore_eos=True))
    engine.step()
    backend = LocalBackend(engine)
    owners, windowed = backend.block_owners({request_id: 0}), backend.window_blocks()
    seq = engine.sequence(request_id)
    window_ids = {block_id for table in seq.block_tables[1:] for block_id in table if block_id != 800}
    held = owners == 0  # the request's row; the blocks that left the window are free (or cached)
    assert set(np.flatnonzero(windowed & held)) == window_ids and len(window_ids) == 5 * 33
    assert not windowed[seq.block_tables[0]].any()

    view = BlockMapView()
    qtbot.addWidget(view)
    view.resize(400, 400)
    view.set_owners(owners, windowed=windowed)
    view.show()
    qtbot.waitExposed(view)
    assert cell_in(view, seq.block_tables[0][0])[1] >= 10  # 800 blocks fit without scrolling
    assert len(colours_in_cell(view, seq.block_tables[0][0])) == 1
    assert len(colours_in_cell(view, next(iter(window_ids)))) == 2  # the owner's colour and the hatch


def cell_in(view: BlockMapView, block_id: int) -> tuple[tuple[int, int], int]:
    """(the top-left corner in the canvas, cell size) of a block's cell."""
    columns, cell, top = view.canvas.layout_now()
    return ((block_id % columns) * cell, top + (block_id // columns) * cell), cell


def colours_in_cell(view: BlockMapView, block_id: int) -> set[int]:
    image = view.canvas.grab().toImage()
    (left, top), cell = cell_in(view, block_id)
    return {image.pixel(left + x, top + y) for x in range(cell - 1) for y in range(cell - 1)}


def test_gemmas_21846_blocks_keep_readable_cells_and_the_map_scrolls(qtbot):
    """Issue 48 #14: Gemma 3's cache filled the tab with 2 x 2-pixel cells whose hatching could not
    be seen. Cells now keep MIN_CELL_PX and the map scrolls."""
    count = 21_846
    owners = np.full(count, BLOCK_FREE)
    owners[: count // 2] = np.arange(count // 2) % 7
    windowed = np.zeros(count, dtype=bool)
    windowed[1 : count // 2 : 2] = True
    owners[-300:-200], windowed[-300:-200] = 3, True  # near the end: seen only when scrolled down
    view = BlockMapView()
    qtbot.addWidget(view)
    view.resize(1000, 190)  # the open tab's area at 1280 x 800
    view.show()
    qtbot.waitExposed(view)
    view.set_owners(owners, windowed=windowed)
    qtbot.wait(20)
    columns, cell, _top = view.canvas.layout_now()
    assert cell == MIN_CELL_PX and columns * cell <= view.viewport().width()
    scroll = view.verticalScrollBar()
    assert scroll.maximum() > 0 and view.canvas.height() >= -(-count // columns) * cell
    assert len(colours_in_cell(view, 0)) == 1
    assert len(colours_in_cell(view, 1)) == 2  # the hatch shows in a 6-pixel cell
    scroll.setValue(scroll.maximum())  # the rows past the visible height are reached and drawn
    qtbot.wait(20)
    on_screen = view.viewport().grab().toImage()  # what the scrolled area paints, not the whole canvas

    def seen(block_id: int) -> set[int]:
        (left, top), cell = cell_in(view, block_id)
        top -= scroll.value()
        return {on_screen.pixel(left + x, top + y) for x in range(cell - 1) for y in range(cell - 1)}

    assert len(seen(count - 250)) == 2 and len(seen(count - 1)) == 1
