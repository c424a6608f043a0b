"""Where a model comes from: the bundled alias, a GGUF file or a Hugging Face directory.

`read_model` returns a `ModelSource` (shape, named weights in Hugging Face naming, tokenizer) and
knows nothing of devices or the decoder module; engine/execution/model.py turns it into a torch model.
"""

from __future__ import annotations

import functools
from pathlib import Path

from engine.errors import ModelLoadError
from engine.loading.bundled_models import BUNDLED_MODELS, bundled_model_file
from engine.loading.gguf import read_gguf, read_gguf_tokenizer
from engine.loading.huggingface import read_hf_directory, read_hf_tokenizer
from engine.loading.model_file import ModelSource, ProgressCallback, no_progress
from engine.loading.tokenizer import Tokenizer


def resolve_model_path(model: str) -> Path:
    """An alias's bundled file, or the given path if it exists."""
    if model in BUNDLED_MODELS:
        return bundled_model_file(model)
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
