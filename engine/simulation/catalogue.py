"""Model shapes and hardware profiles from presets/catalogue/*.toml, each with its source, plus
"this-machine", measured at first use (a large copy for memory bandwidth, a large product for
matmul throughput) and kept in ~/.cache/workbench/hardware.toml (or $WORKBENCH_CACHE/hardware.toml)."""

from __future__ import annotations

import importlib.resources
import json
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from engine.errors import ConfigError
from engine.model_spec.model_config import ModelConfig
from engine.platform.cache_directory import cache_directory
from engine.platform.device import dtype_name, total_memory_bytes
from engine.platform.user_files import locked, replace_text
from engine.settings import build
from engine.simulation.target import target_name
from kernels.timing import timed_runs

CATALOGUE_DIR = Path(str(importlib.resources.files("presets"))) / "catalogue"  # package data (presets/__init__.py)
THIS_MACHINE = "this-machine"


# Each number of a profile, (low, high, low included): past these a profile is no GPU or CPU, and
# the figures it gives mean nothing. A profile once passed with step_overhead_s = 1e9 (serve slept
# for decades in its first step), decode_scale_by_rows = [1e308] (report.json failed on inf) and
# roofline_sharpness = 1e300 (every operator free). The highs are a thousand times or more the
# largest catalogued (H200: 4.8e12 B/s, 2e15 FLOP/s) or measured; sharpness past 64 is max() already.
PROFILE_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "memory_bytes": (0.0, 1e16, False),
    "bandwidth_bytes_s": (0.0, 1e16, False),
    "peak_flops": (0.0, 1e19, False),
    "bandwidth_efficiency": (0.0, 1.0, False),
    "kv_bandwidth_efficiency": (0.0, 1.0, False),
    "compute_efficiency": (0.0, 1.0, False),
    "roofline_sharpness": (1.0, 64.0, True),
    "step_overhead_s": (0.0, 1.0, True),
    "sequence_overhead_s": (0.0, 0.1, True),
    "decode_scale_by_rows": (0.0, 100.0, False),
    "prefill_step_scale": (0.0, 100.0, False),
    "link_bytes_s": (0.0, 1e16, True),
    "link_latency_s": (0.0, 1.0, True),
}


@dataclass
class HardwareProfile:
    source: str
    memory_bytes: float
    bandwidth_bytes_s: float
    peak_flops: float
    # Fractions of peak that a serving step's kernels reach. The defaults are fitted to published
    # serving runs on A100s and H100s (`workbench calibrate --published --refit`, docs/memory.md);
    # `workbench calibrate` fits them to this machine's measurements.
    bandwidth_efficiency: float = 0.75
    # Paged K/V reads are gathers through block tables, not streams: their own efficiency.
    kv_bandwidth_efficiency: float = 0.9
    compute_efficiency: float = 0.65
    # How sharply an operator turns from memory- to compute-bound: its time is
    # (memory^k + compute^k)^(1/k); large k is the kink of max(), 2 a gradual turn.
    roofline_sharpness: float = 2.0
    # The hardware's own fixed costs per step (kernel launches) and per sequence. The serving
    # software's costs are its stack's (engine/simulation/serving_stacks.py); a profile measured
    # on this machine holds the engine's whole host time here instead (`workbench calibrate`).
    step_overhead_s: float = 0.0005
    sequence_overhead_s: float = 0.0
    # A profile measured on this machine: how much longer (or shorter) than the above a real
    # decode-only step of n rows took, as a factor per batch-size bucket (index i: 2^i to
    # 2^(i+1) - 1 rows; the last also every larger batch), and one factor for steps with a
    # prefill; fitted from a real run's own steps (`workbench calibrate`). A CPU's decode is not
    # linear in its rows (caches, threads): 8-15 rows ran 1.24-1.30x what one per-sequence
    # constant gave. Empty and 1 on catalogued GPUs, whose serving stacks carry their costs.
    decode_scale_by_rows: tuple[float, ...] = ()
    prefill_step_scale: float = 1.0
    # The link between two such GPUs (engine/simulation/parallel.py): bytes/s in each direction,
    # seconds per hop, and what it is (0: no link, the GPU is catalogued alone).
    link_bytes_s: float = 0.0
    link_latency_s: float = 0.0
    link: str = ""

    def __post_init__(self) -> None:
        for name, (low, high, low_included) in PROFILE_BOUNDS.items():
            values = getattr(self, name)
            for value in values if isinstance(values, tuple) else (values,):
                inside = (low <= value if low_included else low < value) and value <= high  # NaN is never inside
                if isinstance(value, bool) or not inside:
                    interval = f"{'[' if low_included else '('}{low:g}, {high:g}]"
                    raise ConfigError(f"{name}: expected a number in {interval}, got {value!r}")

    def step_scale(self, rows: int, with_prefill: bool) -> float:
        """The measured factor on a step of `rows` sequences (decode_scale_by_rows, prefill_step_scale)."""
        if with_prefill:
            return self.prefill_step_scale
        if not self.decode_scale_by_rows or rows < 1:
            return 1.0
        return self.decode_scale_by_rows[min(rows.bit_length() - 1, len(self.decode_scale_by_rows) - 1)]


def _table(file_name: str) -> dict:
    path = CATALOGUE_DIR / file_name
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc


def model_names() -> list[str]:
    return sorted(_table("models.toml"))


def catalogued_hardware() -> list[str]:
    """The GPUs of the catalogue, from their datasheets (not measured here)."""
    return sorted(_table("hardware.toml"))


# The GPU the window offers every catalogued model on, and the counts it may take.
LISTED_GPU = "h100-80gb"
_LISTED_COUNTS = (1, 2, 4, 8)


def listed_targets() -> list[str]:
    """The simulated targets the window's model list offers: every catalogued model on the fewest
    H100s (1, 2, 4 or 8) whose memory is at least twice its 16-bit weights (half left for the KV
    cache), so a model added to presets/catalogue/models.toml is offered there too."""
    memory = hardware_profile(LISTED_GPU).memory_bytes
    targets = []
    for name in model_names():
        weight_bytes = 2 * model_shape(name)[0].num_parameters
        count = next((count for count in _LISTED_COUNTS if count * memory >= 2 * weight_bytes), None)
        if count is not None:
            targets.append(target_name(name, LISTED_GPU if count == 1 else f"{count}x{LISTED_GPU}"))
    return targets


def hardware_names() -> list[str]:
    return sorted({*_table("hardware.toml"), THIS_MACHINE, *_cached_profiles()})


def model_shape(name: str) -> tuple[ModelConfig, str]:
    """(shape, source) of a catalogued model."""
    table = _table("models.toml")
    if name not in table:
        raise ConfigError(f"unknown model {name!r}; known models: {', '.join(model_names())}")
    entry = dict(table[name])
    source = entry.pop("source", "")
    return build(ModelConfig, entry, str(CATALOGUE_DIR / "models.toml"), name), source


def hardware_profile(name: str, on_measured: Callable[[Path], None] = lambda path: None) -> HardwareProfile:
    """A catalogued or cached profile; "this-machine" is measured and saved the first time, and
    `on_measured` is told where."""
    table = _table("hardware.toml")
    cached = _cached_profiles()
    if name in table:
        return build(HardwareProfile, table[name], str(CATALOGUE_DIR / "hardware.toml"), name)
    if name in cached:
        return build(HardwareProfile, cached[name], str(_cache_file()), name)
    if name == THIS_MACHINE:
        profile = measure_this_machine()
        on_measured(save_profile(THIS_MACHINE, profile))
        return profile
    raise ConfigError(f"unknown hardware {name!r}; known hardware: {', '.join(hardware_names())}")


def measure_this_machine() -> HardwareProfile:
    """Memory bandwidth from copying 256 MiB; compute from the faster of a 2048^2 float32 and bf16
    product (CUDA: bf16 only). The engine's many-row steps run bf16 on a CPU that has it fast (its
    batched bf16 copy), so a float32 peak alone left prefill above "100%" of it."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtypes = (torch.bfloat16,) if device.type == "cuda" else (torch.float32, torch.bfloat16)
    source = torch.empty(64 << 20, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    bandwidth = 2 * source.nbytes / _best_time(lambda: target.copy_(source))  # read + write
    size = 2048
    products = {}
    for dtype in dtypes:
        left, right = (
            torch.randn(size, size, device=device, dtype=dtype),
            torch.randn(size, size, device=device, dtype=dtype),
        )
        products[dtype] = 2 * size**3 / _best_time(lambda: left @ right)
    dtype, flops = max(products.items(), key=lambda item: item[1])
    return HardwareProfile(
        source="measured on this machine "
        f"({'CUDA ' + torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'}, "
        f"{torch.get_num_threads()} threads): 256 MiB copy, {size}^2 {dtype_name(dtype)} product (the faster)",
        memory_bytes=float(total_memory_bytes(device)),
        bandwidth_bytes_s=bandwidth,
        peak_flops=flops,
    )


def _best_time(function) -> float:
    return min(timed_runs(function, repeats=5))


def _cache_file() -> Path:
    return cache_directory() / "hardware.toml"


def _cached_profiles() -> dict:
    """The saved profiles by name; a file that does not parse is refused naming it, and kept."""
    path = _cache_file()
    try:
        return tomllib.loads(path.read_text()) if path.exists() else {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: not valid TOML ({exc}); it is kept as it is: fix or move it, then calibrate again"
        ) from exc


def check_saved_profiles(name: str) -> None:
    """What `save_profile` would refuse, said before minutes of measuring: a damaged profile file,
    an empty name."""
    if not name.strip():
        raise ConfigError(f"--name: expected a profile name, got {name!r}")
    _cached_profiles()


def save_profile(name: str, profile: HardwareProfile) -> Path:
    """Add or replace a measured profile in the user's cache file (plain TOML, easy to edit): under
    its lock and replaced in one rename (engine/platform/user_files.py). Every name is a quoted key,
    so "my machine", "a.b" or "[x]" is saved and read back as itself."""
    check_saved_profiles(name)
    path = _cache_file()
    with locked(path):
        profiles = _cached_profiles()
        profiles[name] = asdict(profile)
        lines = []
        for profile_name, values in profiles.items():
            lines.append(f"[{_toml_string(profile_name)}]")
            for field in fields(HardwareProfile):
                if field.name in values:  # a profile saved before a field existed takes its default
                    lines.append(f"{field.name} = {_toml_value(values[field.name])}")
            lines.append("")
        replace_text(path, "\n".join(lines))
    return path


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's; non-ASCII kept as it is (JSON's surrogate
    pairs are not TOML), and DEL, a control character to TOML but not to JSON, escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value) -> str:
    """A profile field in TOML: a string quoted (JSON's escapes are TOML's), a tuple as an array."""
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(repr(item) for item in value) + "]"
    return repr(value)
