"""What a run needs to be reproduced: package versions, device, and the model file's identity."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
from pathlib import Path

import torch

from engine.llm_engine import LLMEngine
from engine.platform.device import device_name, dtype_name
from engine.quantization.cpu_products import cpu_features
from engine.simulation.target import is_simulated


@functools.lru_cache(maxsize=8)
def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_identity(path: Path) -> dict:
    if is_simulated(str(path)):
        return {"simulated": str(path), "note": "shapes and hardware from presets/catalogue; no weights"}
    if path.is_dir():
        files = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.json"))
        return {"path": str(path), "files": {file.name: file_sha256(file) for file in files}}
    return {"path": str(path), "sha256": file_sha256(path), "size_bytes": path.stat().st_size}


def environment(engine: LLMEngine) -> dict:
    return {
        "workbench": package_version("workbench"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device_name(engine.device),
        "cpu_features": cpu_features(),  # what the CPU offers torch's kernels, e.g. "AVX512; avx512_bf16, vnni"
        "dtype": dtype_name(engine.dtype),
        "kv_cache_dtype": dtype_name(engine.kv_dtype),
        # "compiled", "eager", "eager (compiling in the background)" or why compilation fell back,
        # when the run started; each step's decode_compiled says how that step ran.
        "decode_step": engine.executor.decode_mode,
        # "compiled halves" (engine/execution/compiled_prefill.py) or eager
        "prefill_step": engine.executor.prefill_mode,
        "model": model_identity(engine.model_path),
        "stored_tensor_types": engine.stored_tensor_types,  # how the file kept its weights, e.g. {"Q4_1": 210}
        "quantization": engine.quantization,  # what runs, e.g. "int4 g32 + int8 head"
        "quantization_choice": engine.quantization_choice,  # why: "auto: ..." or "chosen in the configuration"
        "activation_smoothing": engine.activation_smoothing.describe() if engine.activation_smoothing else None,  # w8a8
    }


def package_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
