"""Presets: TOML files in presets/ that map one to one onto `Scenario` and the dataclasses in it.

`load_preset("chat-steady")` or `load_preset("path/to/file.toml")`; `--set table.key=value`
overrides apply before validation, so an override gets the same messages as the file. A preset's
variants (`[variants.NAME]`) override its `engine` and `traffic` tables for one arm of a comparison.
"""

from __future__ import annotations

import copy
import importlib.resources
import tomllib
from pathlib import Path

from engine.errors import ConfigError
from engine.settings import apply_override, build
from workbench.traffic.scenario import Scenario

PRESET_DIR = Path(str(importlib.resources.files("presets")))  # package data (presets/__init__.py)


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESET_DIR.glob("*.toml"))


def preset_path(name: str) -> Path:
    candidate = Path(name)
    if candidate.suffix == ".toml":
        if not candidate.exists():
            raise ConfigError(f"{candidate}: preset file not found")
        return candidate
    path = PRESET_DIR / f"{name}.toml"
    if not path.exists():
        raise ConfigError(f"unknown preset {name!r}; known presets: {', '.join(preset_names())}")
    return path


def load_preset(
    name: str, overrides: list[str] = (), variant: str | None = None, engine_defaults: dict | None = None
) -> Scenario:
    """The preset's scenario, or one variant of it with the variant's overrides applied.
    `engine_defaults` fills [engine] keys the preset leaves out."""
    path = preset_path(name)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc
    raw.setdefault("name", path.stem)
    _resolve_trace_files(raw, path.parent)
    if engine_defaults:
        engine = raw.setdefault("engine", {})
        if isinstance(engine, dict):  # anything else is refused by build, naming the table
            raw["engine"] = {**engine_defaults, **engine}
    # The overrides apply to the base too: a bad value in the file that `--set` replaces is not
    # refused (they are applied again below, after the variant's settings, so that they win).
    with_overrides = copy.deepcopy(raw)
    for assignment in overrides:
        apply_override(with_overrides, assignment)
    base = build(Scenario, with_overrides, str(path))
    if not overrides and variant is None:
        return base
    where = str(path)
    if variant is not None:
        if variant not in base.variants:
            raise ConfigError(f"{path}: no variant {variant!r}; variants are {', '.join(base.variants) or 'none'}")
        raw = copy.deepcopy(raw)
        changes = base.variants[variant]
        for table, values in (("engine", changes.engine), ("traffic", changes.traffic)):
            if values:
                raw.setdefault(table, {}).update(values)
        where = f"{path} (variant {variant!r})"
    # Overrides from the command line win over the variant's own settings.
    for assignment in overrides:
        apply_override(raw, assignment)
    return build(Scenario, raw, where)


def _resolve_trace_files(raw: dict, folder: Path) -> None:
    """A preset's trace_file (its own, and its variants') is relative to the preset's folder, so
    a preset and its trace travel together; a --set override stays relative to where it is typed."""
    variants = raw.get("variants") if isinstance(raw.get("variants"), dict) else {}
    tables = [raw.get("traffic")] + [
        variant.get("traffic") for variant in variants.values() if isinstance(variant, dict)
    ]
    for table in tables:
        if isinstance(table, dict) and isinstance(table.get("trace_file"), str) and table["trace_file"]:
            table["trace_file"] = str(folder / table["trace_file"])  # an absolute path stays as it is
