"""Shared fixtures: tiny random Llama/Qwen2 checkpoints written as safetensors (tests/tiny_models.py
makes them), and the bundled SmolLM2 model read once per session. Helpers that tests import live in
modules of their own (tiny_models.py, workbench/tiny_runs.py, workbench/gui/window_helpers.py,
engine/simulated.py, kernels/references.py), never here."""

from __future__ import annotations

import os
import tempfile
import threading
import time

import pytest
import torch

# Triton kernels run on the CPU in interpreter mode unless a GPU is present; this must be set
# before anything imports triton.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import settings

from engine.configuration.config import COMPILE_DECODE_ENVIRONMENT
from engine.execution.compile_cache import INDUCTOR_CACHE_ENVIRONMENT
from engine.platform.cache_directory import cache_directory

# Engines in tests (and the CLI and window processes they start) stay eager unless a test asks
# for a compile: every engine compiling its graph in the background would take both cores.
os.environ.setdefault(COMPILE_DECODE_ENVIRONMENT, "off")
# Compiled graphs are shared with the user's cache (compiling them again costs minutes); measured
# hardware profiles, quality figures and compile durations go to a cache of the session's own.
os.environ.setdefault(INDUCTOR_CACHE_ENVIRONMENT, str(cache_directory() / "torch-compile"))
os.environ["WORKBENCH_CACHE"] = tempfile.mkdtemp(prefix="workbench-cache-")
# The window's runs (workbench/runs/run_folder.py) go to a folder of the session's own, not the user's.
os.environ["WORKBENCH_RUNS"] = tempfile.mkdtemp(prefix="workbench-runs-")

from engine import EngineConfig, LLMEngine
from engine.execution.executor import DecodeGraph
from engine.loading.model_source import read_model
from tests.tiny_models import save_tiny_model

# Property tests that set no max_examples of their own run 150 cases; mutation testing, which runs
# them once per mutant, 25 (HYPOTHESIS_PROFILE=mutation, set by `make mutation`).
settings.register_profile("workbench", max_examples=150)
settings.register_profile("mutation", max_examples=25)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "workbench"))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny-llama")
    return directory, save_tiny_model(directory, "llama", num_kv_heads=2)


@pytest.fixture(scope="session")
def smollm_source():
    return read_model("smollm2-135m")


@pytest.fixture
def make_smollm_engine(smollm_source):
    """Build engines on the bundled model with any config, reading the file only once. Unquantized
    unless asked: the tests compare against the float reference (and transformers); the default,
    "auto", has tests of its own (tests/engine/quantization/test_auto_quantization.py)."""

    def make(**overrides) -> LLMEngine:
        settings = dict(device="cpu", dtype="float32", kv_cache_memory=256 << 20, quantization="none")
        settings.update(overrides)
        return LLMEngine(EngineConfig(**settings), source=smollm_source)

    return make


@pytest.fixture(scope="session")
def gemma_source():
    return read_model("gemma3-270m")


@pytest.fixture
def make_gemma_engine(gemma_source):
    """Engines on Gemma 3 270M, the file read once per session; unquantized float32 unless asked."""

    def make(**overrides) -> LLMEngine:
        settings = dict(
            model="gemma3-270m", device="cpu", dtype="float32", kv_cache_memory=256 << 20, quantization="none"
        )
        settings.update(overrides)
        return LLMEngine(EngineConfig(**settings), source=gemma_source)

    return make


@pytest.fixture
def held_compile(monkeypatch):
    """An event that a background compile waits for before it starts: with a warm inductor cache
    the compile can finish before a test looks, so the test releases it once it has seen the
    engine serving eagerly. It waits in short steps, as Python code, so that closing the engine
    can still stop it (a stop is delivered between Python instructions)."""
    release = threading.Event()
    compile_graph = DecodeGraph.compile

    def held(graph, examples):
        deadline = time.monotonic() + 600
        while not release.wait(timeout=0.05) and time.monotonic() < deadline:
            pass
        compile_graph(graph, examples)

    monkeypatch.setattr(DecodeGraph, "compile", held)
    return release
