"""KV capacity in tokens = the cache's bytes / the bytes one token takes, and why two engines'
capacities differ: the cache's size, or its dtype (choosing int8 or int4 explicitly halved the
capacity against quantization "auto" without a word: auto stores the cache in bfloat16 on a CPU,
while an explicit choice keeps kv_cache_dtype "auto", the float32 compute dtype)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.backends.loader import EngineInfo


def why_kv_capacity_differs(base: dict, cand: dict) -> str:
    """Which of the two terms moved between two runs' reports, and why."""
    first, second = base["engine"], cand["engine"]
    if first.get("kv_capacity_tokens") == second.get("kv_capacity_tokens"):
        return "KV capacity: the same in both arms (the same cache size and bytes per token)."
    reasons = []
    cache_bytes = first.get("kv_cache_bytes") or 0, second.get("kv_cache_bytes") or 0
    if abs(cache_bytes[0] - cache_bytes[1]) > 0.01 * max(cache_bytes):  # not just the rounding to whole blocks
        reasons.append(
            f"the cache is {mib_text(first.get('kv_cache_bytes'))} vs {mib_text(second.get('kv_cache_bytes'))} MiB "
            "(engine.kv_cache_memory, or what the device had free after the weights)"
        )
    if first.get("kv_bytes_per_token") != second.get("kv_bytes_per_token"):
        dtypes = [_kv_dtype_and_why(report) for report in (base, cand)]
        reasons.append(
            f"a token takes {count_text(first.get('kv_bytes_per_token'))} vs "
            f"{count_text(second.get('kv_bytes_per_token'))} "
            f"bytes (keys and values of every layer): the cache holds {dtypes[0]} vs {dtypes[1]}"
        )
    return (
        f"KV capacity: {count_text(first.get('kv_capacity_tokens'))} vs {count_text(second.get('kv_capacity_tokens'))} "
        "tokens = "
        "cache bytes / bytes per token, and " + "; ".join(reasons or ["the block rounding differs"]) + "."
    )


def _kv_dtype_and_why(report: dict) -> str:
    versions = report.get("versions", {})
    dtype = versions.get("kv_cache_dtype", "?")
    reason = kv_cache_dtype_reason(
        dtype,
        versions.get("dtype", "?"),
        report["scenario"].get("engine", {}).get("kv_cache_dtype", "auto"),
        str(versions.get("quantization_choice", "")),
    )
    return f"{dtype} ({reason})"


def kv_cache_dtype_reason(kv_dtype: str, dtype: str, configured: str, quantization_choice: str) -> str:
    """Why the cache holds `kv_dtype`: set in the configuration, chosen by quantization "auto"
    (bfloat16 on a CPU), or kv_cache_dtype "auto", which keeps the compute dtype `dtype`."""
    if configured != "auto":
        return "engine.kv_cache_dtype"
    if quantization_choice.startswith("auto") and kv_dtype != dtype:
        return "chosen by quantization auto"
    return "kv_cache_dtype auto: the compute dtype"


def mib_text(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f}"


def count_text(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def kv_cache_note(info: EngineInfo) -> str:
    """The Memory tab's line on the cache's dtype for a loaded engine (an EngineInfo): what it
    holds, why, and what bfloat16 would give where it holds float32."""
    reason = kv_cache_dtype_reason(
        info.kv_cache_dtype, info.dtype, info.config.kv_cache_dtype, info.quantization_choice
    )
    note = f"{info.summary['kv_capacity_tokens']:,} tokens in {info.kv_cache_dtype} ({reason})"
    groups = info.summary.get("kv_groups", "")
    if "sliding-window" in groups:
        note += (
            f"; blocks shared by {groups}: those tokens when every layer keeps every token, more for requests "
            "longer than the window, whose blocks in the sliding-window layers are freed as it moves on"
        )
    if info.kv_cache_dtype == "float32" and info.device == "cpu":
        note += (
            "; in bfloat16 (quantization auto on a CPU, or engine.kv_cache_dtype = bfloat16) the same bytes hold "
            "twice the tokens"
        )
    return note
