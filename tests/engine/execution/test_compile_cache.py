"""Compiled graphs kept across runs, and the warm-up's estimate from the last compile's duration."""

from __future__ import annotations

import pytest
import torch

from engine.execution.compile_cache import (
    INDUCTOR_CACHE_ENVIRONMENT,
    CompileProgress,
    graph_key,
    last_duration_s,
    record_duration,
    use_persistent_compile_cache,
)
from tests.tiny_models import tiny_engine


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    return tmp_path


def test_inductor_uses_the_workbench_cache_unless_a_folder_was_chosen(own_cache, monkeypatch):
    monkeypatch.delenv(INDUCTOR_CACHE_ENVIRONMENT, raising=False)
    assert use_persistent_compile_cache() == own_cache / "torch-compile"
    monkeypatch.setenv(INDUCTOR_CACHE_ENVIRONMENT, "/somewhere/else")
    assert str(use_persistent_compile_cache()) == "/somewhere/else"


def test_durations_are_recorded_per_graph_and_a_damaged_file_is_rewritten(own_cache):
    assert last_duration_s("a") is None
    record_duration("a", 31.24)
    record_duration("b", 280.0)
    assert last_duration_s("a") == 31.2 and last_duration_s("b") == 280.0
    (own_cache / "compile-durations.json").write_text("[not json")
    assert last_duration_s("a") is None  # an estimate lost, nothing else
    record_duration("a", 12.0)
    assert last_duration_s("a") == 12.0


def test_the_progress_says_how_much_is_left_when_it_can():
    assert CompileProgress(12.4, 31.0).describe() == "compiling the decode and prefill graphs: 12 s of about 31 s"
    assert (
        CompileProgress(40.0, 31.0).describe()
        == "compiling the decode and prefill graphs: 40 s (the last one here took 31 s)"
    )
    assert "40 s so far (the first compile on this machine" in CompileProgress(40.0, None).describe()


def test_the_key_follows_what_decides_the_generated_code(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory)
    model = engine.executor.model
    key = graph_key(model, torch.float32, (1, 2))
    assert key == graph_key(model, torch.float32, (1, 2))
    assert key != graph_key(model, torch.bfloat16, (1, 2))  # KV dtype
    assert key != graph_key(model, torch.float32, (1, 2, 8))  # batch sizes compiled
    quantized = tiny_engine(directory, quantization="int8")
    assert key != graph_key(quantized.executor.model, torch.float32, (1, 2))  # the modules' types


@pytest.mark.slow  # compiles the tiny model's decode graph
def test_a_finished_compile_gives_the_next_engine_its_estimate(own_cache, tiny_llama, held_compile):
    torch._dynamo.reset()
    directory, _ = tiny_llama
    held_compile.set()  # the first compiles at once
    first = tiny_engine(directory, compile_decode="blocking")
    assert first.executor.decode_mode == "compiled" and first.executor.compile_progress is None
    held_compile.clear()  # the second's compile waits, so that its progress can be read
    second = tiny_engine(directory, compile_decode="background")
    progress = second.executor.compile_progress
    second.close()
    assert progress is not None and progress.expected_s is not None and progress.expected_s > 0


def test_an_engine_points_inductor_at_the_workbench_cache_before_its_load_compiles(tiny_llama, tmp_path):
    """In a process of its own (this suite sets the variable for itself): a load that uses
    inductor before the decode graph does (quantization timing) once left inductor's /tmp folder
    in the variable, so the cache a reboot empties was the one used."""
    import os
    import subprocess
    import sys

    directory, _ = tiny_llama
    script = (
        "import os\n"
        "from tests.tiny_models import tiny_engine\n"
        f"tiny_engine({str(directory)!r}, compile_decode='off')\n"
        "import torch._inductor.utils\n"  # what a compile imports: it sets the variable where unset
        f"print(os.environ[{INDUCTOR_CACHE_ENVIRONMENT!r}])\n"
    )
    environment = {key: value for key, value in os.environ.items() if key != INDUCTOR_CACHE_ENVIRONMENT}
    environment["WORKBENCH_CACHE"] = str(tmp_path)
    finished = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, check=True, timeout=300
    )
    assert finished.stdout.split()[-1] == str(tmp_path / "torch-compile")
