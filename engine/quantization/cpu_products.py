"""Which product path pays on the CPU in hand: measured at load, never assumed from its name.

A quantized layer on the CPU multiplies with torch's packed int4 or int8 kernel, or, in steps of
BATCHED_ROWS rows or more, with a bf16 copy of its weights (QuantizedLinear). The copy pays where
the CPU multiplies bf16 natively (AVX-512 BF16, AMX): on the development EPYC a 64-row bf16
product ran 2.0x the packed int4 kernel's speed. Where it does not, oneDNN emulates bf16 and the
copy costs both memory and time: with oneDNN and ATen held to AVX2 on the same machine
(ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2) the same product ran 0.3x
(docs/measurements.md, "Kernels for the CPU in hand"). The flags a CPU
reports do not settle it (oneDNN's ISA limit, a hypervisor's masking, AMX that needs the kernel's
permission), so "auto" times the two paths on one layer of the model's own shape and keeps the
copy only where it is clearly faster.
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass

import torch

from engine.quantization import get_method

# The step size the copy is timed at: a busy decode batch or a short prefill chunk.
TIMED_ROWS = 64
# The copy costs 2 bytes per weight: keep it only for a gain well past the timing's noise.
COPY_PAYS_FROM = 1.25
_REPEATS = 5


@dataclass(frozen=True)
class CopyTiming:
    """One layer's product at TIMED_ROWS rows, both ways, median of _REPEATS interleaved runs."""

    method: str
    rows: int
    packed_seconds: float
    bf16_seconds: float

    @property
    def speedup(self) -> float:
        """How many times faster the bf16 copy multiplied than the packed kernel."""
        return self.packed_seconds / self.bf16_seconds

    @property
    def pays(self) -> bool:
        return self.speedup >= COPY_PAYS_FROM

    def describe(self) -> str:
        """E.g. "a 64-row bf16 product ran 2.0x the int4 kernel's speed on this CPU"."""
        return f"a {self.rows}-row bf16 product ran {self.speedup:.1f}x the {self.method} kernel's speed on this CPU"


def cpu_features() -> str:
    """What torch says the CPU offers its kernels, e.g. "AVX512; avx512_bf16, vnni" (for provenance)."""
    probes = {
        "avx512_bf16": torch.cpu._is_avx512_bf16_supported,
        "amx": torch.cpu._is_amx_tile_supported,
        "vnni": torch.cpu._is_vnni_supported,
    }
    offered = [name for name, probe in probes.items() if probe()]
    return f"{torch.backends.cpu.get_cpu_capability()}; {', '.join(offered) or 'no bf16 or int8 dot-product units'}"


@functools.lru_cache(maxsize=8)
def time_batched_copy(method: str, group_size: int, in_features: int, out_features: int) -> CopyTiming:
    """Time a quantized layer of this shape (random weights) with and without its bf16 copy, both
    through QuantizedLinear.forward, so what is timed is exactly what a step runs. Takes tens of
    milliseconds for SmolLM2's gate projection; cached per shape for the process."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=generator) / in_features**0.5
    layer = get_method(method).create_linear(weight, None, group_size)
    layer.keep_batched_copy()
    copy = layer.batched_weight
    x = torch.randn(TIMED_ROWS, in_features, generator=generator)

    def seconds(batched_weight: torch.Tensor | None) -> float:
        layer.batched_weight = batched_weight
        start = time.perf_counter()
        layer(x)
        return time.perf_counter() - start

    with torch.inference_mode():
        seconds(None), seconds(copy)  # first calls build oneDNN's primitives
        packed, bf16 = [], []
        for _ in range(_REPEATS):  # interleaved, so a slow spell on a noisy machine hits both
            packed.append(seconds(None))
            bf16.append(seconds(copy))
    return CopyTiming(method, TIMED_ROWS, statistics.median(packed), statistics.median(bf16))
