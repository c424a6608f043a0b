"""The block map on a model with sliding-window layers (Gemma 3 270M's shape, simulated): the
backend marks the blocks the window groups hold, and the view hatches them."""

from __future__ import annotations

import numpy as np

from engine import EngineConfig, LLMEngine, SamplingParams
from workbench.backends.local import LocalBackend
from workbench.gui.block_map import BlockMapView


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
    image = view.grab().toImage()

    def colours_in_cell(block_id: int) -> set[int]:
        columns = max(1, int((owners.size * view.width() / view.height()) ** 0.5))
        cell = max(1, min(view.width() // columns, view.height() // -(-owners.size // columns)))
        left, top = (block_id % columns) * cell, (block_id // columns) * cell
        return {image.pixel(left + x, top + y) for x in range(cell - 1) for y in range(cell - 1)}

    plain_colour = colours_in_cell(seq.block_tables[0][0])
    assert len(plain_colour) == 1
    assert len(colours_in_cell(next(iter(window_ids)))) == 2  # the owner's colour and the hatch
