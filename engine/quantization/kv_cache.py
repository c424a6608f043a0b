"""What a `kv_cache_dtype` name holds: "auto" the compute dtype, a float dtype's name itself, and
the quantized caches by their codes' dtype (int8, fp8_e4m3: kernels/quantized_kv.py)."""

from __future__ import annotations

import torch

from engine.platform.device import resolve_dtype
from kernels.quantized_kv import CODE_DTYPES

QUANTIZED_KV_CACHE_DTYPES = CODE_DTYPES


def resolve_kv_dtype(name: str, dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The KV cache's dtype for `name` on an engine computing in `dtype`."""
    if name == "auto":
        return dtype
    return QUANTIZED_KV_CACHE_DTYPES.get(name) or resolve_dtype(name, device)
