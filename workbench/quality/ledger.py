"""The quality measurements this machine has made, kept by model file and configuration.

`workbench quality` records every option it evaluates in $WORKBENCH_CACHE/quality.json
(default ~/.cache/workbench/quality.json), keyed by the model file (its name and size in bytes)
and by what ran (the engine's quantization description, compute dtype and KV cache dtype). The
window looks the loaded engine up there, so it can say what the configuration costs against the
file's own weights without measuring anything at load time, and says how to measure it when the
ledger has no entry.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from engine.errors import ConfigError
from engine.platform.cache_directory import cache_directory
from engine.platform.user_files import locked, replace_text
from engine.quantization import UNQUANTIZED

EXACT = "exact: the file's weights in float32, no quantization"


def ledger_path() -> Path:
    return cache_directory() / "quality.json"


def model_key(model_path: str | Path) -> str:
    """A model file (or Hugging Face folder) by name and size: cheap, and changes when the file does."""
    path = Path(model_path)
    size = sum(file.stat().st_size for file in path.glob("*.safetensors")) if path.is_dir() else path.stat().st_size
    return f"{path.name} ({size} bytes)"


def configuration_key(quantization: str, dtype: str, kv_cache_dtype: str) -> str:
    """What ran, e.g. "int4 g32 + int8 head, bf16 copy from 8 rows; float32; KV bfloat16"."""
    return f"{quantization}; {dtype}; KV {kv_cache_dtype}"


def record(model_path: str | Path, measurements: dict[str, dict], ledger: Path | None = None) -> Path:
    """Add or replace measurements ({configuration key: figures}) for one model file; each gets today's date."""
    ledger = ledger or ledger_path()
    with locked(ledger):  # concurrent measurements each add theirs (engine/platform/user_files.py)
        entries = _read(ledger)
        per_model = entries.setdefault(model_key(model_path), {})
        for configuration, figures in measurements.items():
            per_model[configuration] = {**figures, "measured_on": date.today().isoformat()}
        replace_text(ledger, json.dumps(entries, indent=2, sort_keys=True) + "\n")
    return ledger


def check_ledger(ledger: Path | None = None) -> None:
    """ConfigError naming the ledger when it cannot be read back: `workbench quality` says so
    before it measures, not after."""
    _read(ledger or ledger_path())


def quality_line(
    model_path: str | Path, option: str, quantization: str, dtype: str, kv_cache_dtype: str, ledger: Path | None = None
) -> str:
    """One line for the window: the configuration's measured cost against the file's own weights,
    that it has none, or the command that measures it. `option` is the quantization as configured
    ("auto", "int4"), `quantization` what it resolved to ("int4 g32 + int8 head, ...")."""
    if quantization == UNQUANTIZED and dtype == kv_cache_dtype == "float32":
        return EXACT
    try:
        figures = measured_quality(model_path, quantization, dtype, kv_cache_dtype, ledger)
    except ConfigError as error:
        return f"quality cost unknown: {error}"
    if figures is None:
        return f"quality cost not measured on this machine: run workbench quality --quant {option}"
    return (
        f"vs the file's own weights: perplexity {figures['perplexity_change_perc']:+.2f}%, "
        f"KL {figures['kl_divergence_mean_nats']:.5f} nats/token, top-1 agreement "
        f"{figures['top1_agreement_perc']:.2f}% "
        f"(n = {figures['evaluated_tokens']:,} tokens, measured {figures['measured_on']})"
    )


def measured_quality(
    model_path: str | Path, quantization: str, dtype: str, kv_cache_dtype: str, ledger: Path | None = None
) -> dict | None:
    """The ledger's figures for this configuration of this model file (perplexity_change_perc,
    kl_divergence_mean_nats, top1_agreement_perc, evaluated_tokens, measured_on), or None."""
    return (
        _read(ledger or ledger_path())
        .get(model_key(model_path), {})
        .get(configuration_key(quantization, dtype, kv_cache_dtype))
    )


def _read(ledger: Path) -> dict:
    """The ledger's entries; a damaged ledger is refused, never read as empty (the next measurement
    rewrote it with only its own rows)."""
    if not ledger.exists():
        return {}
    try:
        entries = json.loads(ledger.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{ledger}: not a quality ledger ({error}); it is kept as it is: fix or move it") from None
    if not isinstance(entries, dict) or not all(isinstance(rows, dict) for rows in entries.values()):
        raise ConfigError(f"{ledger}: not a quality ledger (expected a table of model files); it is kept as it is")
    return entries
