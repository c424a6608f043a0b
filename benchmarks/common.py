"""What both benchmarks need: engines per option on the fixed workload, and the machine's ceilings."""

from __future__ import annotations

import platform
import resource
import time

import torch

from benchmarks.fixed_workload import fixed_workload, run_fixed_workload
from engine import EngineConfig, LLMEngine
from engine.loading.model_source import read_model
from engine.platform.device import device_name
from engine.quantization import own_methods
from engine.simulation.catalogue import measure_this_machine

OPTIONS = tuple(own_methods())


def variants(compile_too: bool) -> list[tuple[str, dict]]:
    """(label, EngineConfig overrides): the default configuration (measured once its background
    compile has finished: `build_engine`), then each quantization option, eager and, if asked,
    with the decode step compiled before the run (EngineConfig.compile_decode)."""
    rows = [(option, {"quantization": option}) for option in OPTIONS]
    rows += [
        ("int4 + int8 head", {"quantization": "int4", "quantize_lm_head": True}),
        (
            "w4a8 + int8 head, KV bf16",
            {"quantization": "w4a8", "quantize_lm_head": True, "batched_bf16_copy": True, "kv_cache_dtype": "bfloat16"},
        ),
        ("w8a8 + w8a8 head", {"quantization": "w8a8", "quantize_lm_head": True}),
        ("w8a8 + w8a8 head, KV bf16", {"quantization": "w8a8", "quantize_lm_head": True, "kv_cache_dtype": "bfloat16"}),
    ]
    eager = [(label, {**overrides, "compile_decode": "off"}) for label, overrides in rows]
    compiled = [(f"{label}, compiled", {**overrides, "compile_decode": "blocking"}) for label, overrides in rows]
    return [("default", {}), *eager, *(compiled if compile_too else [])]


def build_engine(source, overrides: dict, **settings) -> LLMEngine:
    """The engine of one row. The default configuration's row waits until its background compile
    has finished (or failed), so that it measures what a user gets once the switch is made."""
    engine = LLMEngine(EngineConfig(**settings, **overrides), source=source)
    while engine.executor.compile_progress is not None:
        time.sleep(0.5)
    return engine


def chosen_variants(compile_too: bool, only: str | None) -> list[tuple[str, dict]]:
    """The variants whose labels are in `only` (semicolon-separated: labels hold commas), or all."""
    wanted = {label.strip() for label in only.split(";")} if only else None
    rows = [(label, overrides) for label, overrides in variants(compile_too) if wanted is None or label in wanted]
    unknown = (wanted or set()) - {label for label, _ in rows}
    if unknown:
        raise SystemExit(
            f"--only: no row named {', '.join(sorted(unknown))}; rows: "
            f"{'; '.join(label for label, _ in variants(True))}"
        )
    return rows


def row_label(label: str, overrides: dict, engine: LLMEngine) -> str:
    """The default configuration's row says what it chose, e.g. "default: int4 g32 + int8 head,
    compiled"."""
    return label if overrides else f"{label}: {engine.quantization}, {engine.executor.decode_mode}"


def peak_resident_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def machine_line() -> str:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return f"{platform.machine()}, {device_name(device)}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}"


def engine_run(source, label: str, overrides: dict, prompts: list[list[int]], output_len: int) -> dict:
    engine = build_engine(source, overrides, max_num_seqs=len(prompts), max_num_batched_tokens=2048)
    return {
        "option": row_label(label, overrides, engine),
        "weight_bytes": engine.weight_bytes,
        **run_fixed_workload(engine, prompts, output_len),
    }


__all__ = [
    "build_engine",
    "engine_run",
    "variants",
    "chosen_variants",
    "row_label",
    "fixed_workload",
    "machine_line",
    "measure_this_machine",
    "peak_resident_mb",
    "read_model",
]
