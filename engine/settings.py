"""Build validated dataclasses from plain mappings (parsed TOML, `--set key=value` overrides).

Every complaint names where the value came from (file and section), the key, what was expected
and what was found; nothing falls back to a silent default.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from typing import Any, TypeVar

from engine.errors import ConfigError

T = TypeVar("T")


def build(cls: type[T], values: dict[str, Any], source: str, table: str = "") -> T:
    """An instance of dataclass `cls` from `values`. Errors read "SOURCE: TABLE.KEY: problem",
    SOURCE being the file (or "--set") and TABLE the dotted path of the table."""
    where = f"{source}: {table}" if table else source
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a table of settings, got {values!r}")
    hints = typing.get_type_hints(cls)
    names = [field.name for field in dataclasses.fields(cls) if field.init]
    unknown = sorted(set(values) - set(names))
    if unknown:
        key = f"{table}.{unknown[0]}" if table else unknown[0]
        raise ConfigError(f"{source}: unknown key {key!r}; expected one of {', '.join(names)}")
    required = [
        field.name
        for field in dataclasses.fields(cls)
        if field.init and field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if name not in values]
    if missing:
        keys = ", ".join(repr(f"{table}.{name}" if table else name) for name in missing)
        raise ConfigError(f"{source}: missing key {keys}")
    arguments = {
        name: _convert(hints[name], value, source, f"{table}.{name}" if table else name)
        for name, value in values.items()
    }
    try:
        return cls(**arguments)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}" if table else f"{source}: {error}") from error


def _convert(expected: Any, value: Any, source: str, key: str) -> Any:
    where = f"{source}: {key}"
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        options = [option for option in typing.get_args(expected) if option is not type(None)]
        if value is None and len(options) < len(typing.get_args(expected)):
            return None
        if len(options) == 1:  # X | None: X's own message is the useful one
            return _convert(options[0], value, source, key)
        for option in options:
            try:
                return _convert(option, value, source, key)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {_describe(expected)}, got {value!r}")
    if origin is list:
        (item_type,) = typing.get_args(expected)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_convert(item_type, item, source, f"{key}[{index}]") for index, item in enumerate(value)]
    if origin is tuple:  # tuple[X, ...]: a TOML array
        item_type = typing.get_args(expected)[0]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(_convert(item_type, item, source, f"{key}[{index}]") for index, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        _, item_type = typing.get_args(expected)
        return {name: _convert(item_type, item, source, f"{key}.{name}") for name, item in value.items()}
    if dataclasses.is_dataclass(expected):
        return build(expected, value, source, key)
    if expected is Any:
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # hundreds of digits: past any float
            raise ConfigError(
                f"{where}: expected a finite number, got an integer of {len(str(value))} digits"
            ) from None
    if expected is float and isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if expected in (int, float) and isinstance(value, bool):
        raise ConfigError(f"{where}: expected {_describe(expected)}, got {value!r}")
    if not isinstance(value, expected):
        raise ConfigError(f"{where}: expected {_describe(expected)}, got {value!r}")
    return value


def check_finite(instance) -> None:
    """ConfigError for a float field of the dataclass instance that is NaN or infinite: the rule
    for every number, whether it came from a preset, `--set` or a window's field."""
    for field in dataclasses.fields(instance):
        value = getattr(instance, field.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{field.name}: expected a finite number, got {value!r}")


def _describe(expected: Any) -> str:
    if typing.get_origin(expected) in (typing.Union, types.UnionType):
        return " or ".join(_describe(option) for option in typing.get_args(expected))
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "nothing"}
    return names.get(expected, getattr(expected, "__name__", str(expected)))


def apply_override(values: dict[str, Any], assignment: str) -> None:
    """Apply `section.key=value` (value in TOML syntax; bare words are strings) to nested tables."""
    path, separator, text = assignment.partition("=")
    if not separator or not path.strip():
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. engine.max_num_seqs=32")
    try:
        value = tomllib.loads(f"value = {text.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    *tables, key = path.strip().split(".")
    target = values
    for table in tables:
        target = target.setdefault(table, {})
        if not isinstance(target, dict):
            raise ConfigError(f"--set {assignment!r}: {table!r} is not a table")
    target[key] = value
