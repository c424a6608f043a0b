"""Shared fixtures for tests that need a real server: `workbench serve` in a subprocess on a free
loopback port (benchmarks/server_processes.py starts it)."""

from __future__ import annotations

import pytest

from benchmarks.server_processes import free_port, start_workbench_server
from engine.loading.model_source import read_tokenizer


@pytest.fixture(scope="module")
def server():
    """The bundled model served on loopback (a small KV cache and context keep it quick)."""
    port = free_port()
    process = start_workbench_server(
        port, "--set", "engine.max_model_len=512", "--set", "engine.kv_cache_memory=67108864"
    )
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def tokenizer():
    return read_tokenizer("smollm2-135m")
