"""The CMake flags `make peers` builds llama.cpp with, chosen from the CPU at hand:

    python -m benchmarks.llama_cpp_build            # prints the flags, then the build's stamp name

A fixed AVX-512 build gave a machine without AVX-512 a binary that died on an illegal instruction;
a native build (GGML_NATIVE) turns on ggml's AMX backend by itself, whose repacked matrix products
crash the first generation on Sapphire Rapids cores (SIGSEGV, llama.cpp issue 20824, unfixed). So
each instruction set is named, on where /proc/cpuinfo lists it, and AMX is always off. The stamp
names the flags, so a venv built for another CPU is rebuilt rather than reused."""

from __future__ import annotations

import hashlib
from pathlib import Path

# ggml's option for each x86 feature, by the flag /proc/cpuinfo lists for it.
_FEATURES = (
    ("avx", "GGML_AVX"),
    ("avx2", "GGML_AVX2"),
    ("fma", "GGML_FMA"),
    ("f16c", "GGML_F16C"),
    ("bmi2", "GGML_BMI2"),
    ("avx512f", "GGML_AVX512"),
    ("avx512vbmi", "GGML_AVX512_VBMI"),
    ("avx512_vnni", "GGML_AVX512_VNNI"),
    ("avx512_bf16", "GGML_AVX512_BF16"),
)
_ALWAYS = ("-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first processor's feature flags; empty where /proc/cpuinfo is not (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def cmake_args(flags: set[str]) -> list[str]:
    return [
        *_ALWAYS[:1],
        *(f"-D{option}={'ON' if flag in flags else 'OFF'}" for flag, option in _FEATURES),
        *_ALWAYS[1:],
    ]


def stamp_name(args: list[str]) -> str:
    """The file `make peers` leaves in the venv once built with these flags."""
    return ".installed-" + hashlib.sha256(" ".join(args).encode()).hexdigest()[:12]


if __name__ == "__main__":
    chosen = cmake_args(cpu_flags())
    print(" ".join(chosen))
    print(stamp_name(chosen))
