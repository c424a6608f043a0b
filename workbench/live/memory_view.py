"""The Memory tab's view model: what it shows for a loaded engine, without Qt.

The loaded device's memory, measured, beside the engine's own byte counts; or a simulated GPU's
(one GPU or a group), every line an estimate, with what its times are worth against published
runs. The same stated errors go to the plots' header (`simulated_errors`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from engine.configuration.memory import MemoryLine, memory_lines, process_resident_bytes
from engine.simulation import SimulatedTarget, is_simulated
from engine.simulation.catalogue import hardware_profile
from workbench.analysis.kv_capacity import kv_cache_note
from workbench.analysis.stated_error import FIGURE_KINDS, Region, StatedError, stated_error
from workbench.backends.loader import EngineInfo


@dataclass(frozen=True)
class MemoryView:
    lines: list[MemoryLine]
    device_total: int  # bytes: the device's whole memory, or the simulated group's
    device: str  # "cpu", or "h100-80gb (simulated, 4 GPUs: TP 2 x PP 2)"
    quality: str = ""  # what the weights' format costs (the quality ledger's line)
    kv_note: str = ""  # what the KV cache holds its tokens in, and why
    per_gpu: list[MemoryLine] = field(default_factory=list)  # one GPU's lines, for a split model
    timing: list[str] = field(default_factory=list)  # a simulated GPU's stated errors, in words
    simulated_errors: list[StatedError] = field(default_factory=list)  # the same, for the plots


def memory_view(info: EngineInfo) -> MemoryView:
    summary, config = info.summary, info.config
    simulated = is_simulated(config.model)
    on_cpu = info.device.split(":")[0] == "cpu"
    lines = memory_lines(
        info.model_config,
        weight_bytes=summary["weight_bytes"],
        kv_cache_bytes=summary["kv_cache_bytes"],
        kv_blocks=summary["kv_blocks"],
        block_size=config.block_size,
        kv_bytes_per_token=summary["kv_bytes_per_token"],
        bytes_per_element=info.bytes_per_element,
        step_tokens=config.max_num_batched_tokens,
        max_seqs=config.max_num_seqs,
        resident_bytes=process_resident_bytes() if on_cpu and not simulated else None,
        weight_parts=summary.get("weight_parts"),
    )
    if not simulated:
        return MemoryView(
            lines, info.device_memory_bytes, info.device, f"{info.quantization} — {info.quality}", kv_cache_note(info)
        )
    # Before traffic has run, its load is unknown: the errors over the settings' published runs at any load.
    region = Region.of(dataclasses.replace(config, serving_stack=summary["serving_stack"]))
    errors = [stated_error(region, kind) for kind in FIGURE_KINDS]
    target = SimulatedTarget.parse(config.model)  # "4xh100-80gb": the group's memory, the lines its totals
    count = target.gpu_count
    group = f", {count} GPUs: TP {config.tensor_parallel_size} x PP {config.pipeline_parallel_size}"
    return MemoryView(
        [dataclasses.replace(line, measured=False) for line in lines],
        count * hardware_profile(target.gpu).memory_bytes,
        f"{target.hardware} (simulated{group if count > 1 else ''})",
        per_gpu=info.per_gpu,
        timing=[error.phrase() for error in errors],
        simulated_errors=errors,
    )
