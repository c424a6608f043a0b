"""The host allocator's thresholds: a freed block of tens of megabytes stays mapped for reuse."""

import subprocess
import sys

import pytest

from engine.host_allocator import keep_freed_memory_for_reuse

# Allocates and touches 24 MB, frees it, and prints how much of it left the resident set (MB).
_RESIDENT_DROP = """
import sys, torch
from engine.host_allocator import keep_freed_memory_for_reuse
if sys.argv[1] == "keep":
    assert keep_freed_memory_for_reuse()
def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20
block = torch.ones(6 * 2**20)
before = resident_mb()
del block
print(before - resident_mb())
"""


def resident_drop_mb(mode: str) -> float:
    done = subprocess.run([sys.executable, "-c", _RESIDENT_DROP, mode], capture_output=True, text=True, check=True)
    return float(done.stdout)


@pytest.mark.skipif(not keep_freed_memory_for_reuse(), reason="glibc's malloc only")
def test_a_freed_block_stays_mapped_once_the_thresholds_are_set():
    assert resident_drop_mb("default") > 20  # glibc's default: mmapped, unmapped when freed
    assert resident_drop_mb("keep") < 4
