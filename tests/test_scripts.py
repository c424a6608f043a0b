"""The scripts under scripts/ call only what exists: every `python -m MODULE` they name resolves
to a module of this project or an installed package (gpu_check.sh called kernels.bench for months
after it had moved)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_a_script_runs_exists():
    named = []
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        for module in re.findall(r"-m\s+([A-Za-z_][\w.]*)", script.read_text()):
            named.append(module)
            assert importlib.util.find_spec(module) is not None, f"{script.name}: python -m {module}: no such module"
    assert "benchmarks.kernel_timings" in named and "pytest" in named  # the check reads the scripts it means to
