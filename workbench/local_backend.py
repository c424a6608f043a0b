"""The in-process engine (real or simulated) behind the Backend protocol.

Only this module calls `LLMEngine.step()`; it runs in whatever thread calls `advance()` (the
window's engine thread, or the headless runner's). Everything is exposed: it is the engine itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from engine import EngineConfig, LLMEngine
from engine.model_config import ModelConfig
from engine.model_file import ModelSource, ProgressCallback
from engine.model_source import read_model
from engine.sampling_params import SamplingParams
from engine.simulation import is_simulated
from engine.tokenizer import Tokenizer
from workbench.backend import BLOCK_CACHED, BLOCK_FREE, BLOCK_SHARED, IN_PROCESS, BackendUpdate, RequestProgress
from workbench.provenance import environment


class LocalBackend:
    capabilities = IN_PROCESS

    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self.name = f"in-process engine ({engine.executor.decode_mode})"
        self.max_model_len = engine.max_model_len
        self.vocab_size = engine.model_config.vocab_size
        self.tokenizer = engine.tokenizer
        self.kv_capacity_tokens = engine.kv_capacity_tokens
        self.kv_cache_bytes = engine.kv_cache_bytes
        self.num_kv_blocks = engine.num_kv_blocks

    # The engine's clock and sleep, looked up on each call: tests and benchmarks may swap them.
    def clock(self) -> float:
        return self.engine.clock()

    def sleep(self, seconds: float) -> None:
        self.engine.sleep(seconds)

    def describe(self) -> dict:
        engine = self.engine
        return {
            "versions": environment(engine),
            "engine": {
                "kv_blocks": engine.num_kv_blocks,
                "kv_capacity_tokens": engine.kv_capacity_tokens,
                "kv_cache_bytes": engine.kv_cache_bytes,
                "kv_bytes_per_token": engine.kv_bytes_per_token,
                "weight_bytes": engine.weight_bytes,
                "max_model_len": engine.max_model_len,
                "num_parameters": engine.model_config.num_parameters,
            },
        }

    def submit(self, prompt: str | list[int], params: SamplingParams, *, request_id: str, arrival_time: float,
               priority: int = 0) -> str:
        return self.engine.add_request(prompt, params, arrival_time=arrival_time, priority=priority, request_id=request_id)

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished()

    def advance(self) -> BackendUpdate:
        step = self.engine.step()
        return BackendUpdate(outputs=step.outputs, stats=step.stats, scheduled=step.scheduled)

    def progress(self, request_id: str) -> RequestProgress | None:
        seq = self.engine.sequence(request_id)
        if seq is None:
            return None
        metrics = dataclasses.replace(seq.metrics, token_times=list(seq.metrics.token_times))
        return RequestProgress(seq.state, metrics, seq.token_ids[: seq.num_prompt_tokens], seq.num_tokens)

    def block_owners(self, rows: dict[str, int]) -> np.ndarray:
        manager = self.engine.block_manager
        owners = np.full(manager.num_blocks, BLOCK_FREE)
        for request_id, row in rows.items():
            seq = self.engine.sequence(request_id)
            for block_id in seq.block_table if seq is not None else ():
                owners[block_id] = BLOCK_SHARED if manager.is_shared(block_id) else row
        owners[manager.cached_free_block_ids()] = BLOCK_CACHED
        return owners


@dataclass
class EngineInfo:
    """What the window may know about the loaded engine (all immutable or thread-safe)."""

    config: EngineConfig
    summary: dict  # capacity and byte counts, all measured (the run log's "engine")
    dtype: str
    bytes_per_element: int
    device: str
    model_path: str
    model_config: ModelConfig
    tokenizer: Tokenizer | None  # decoding is thread-safe (the tokenizers library is immutable)
    decode_mode: str  # "compiled", "eager", "simulated", or why compilation fell back to eager


class LocalBackendLoader:
    """Builds local backends for the window. It keeps the last model file read, so that a new
    configuration of the same model does not read the file again."""

    def __init__(self):
        self._source: ModelSource | None = None
        self._source_model: str | None = None

    def load(self, config: EngineConfig, progress: ProgressCallback) -> tuple[LocalBackend, EngineInfo]:
        if is_simulated(config.model):
            # The window watches a simulated engine in real time, unless a speed was chosen.
            config = dataclasses.replace(config, simulation_speed=config.simulation_speed or 1.0)
        elif self._source is None or self._source_model != config.model:
            self._source, self._source_model = read_model(config.model, progress), config.model
        engine = LLMEngine(config, progress=progress, source=None if is_simulated(config.model) else self._source)
        backend = LocalBackend(engine)
        info = EngineInfo(
            config=config, summary=backend.describe()["engine"], dtype=str(engine.dtype).removeprefix("torch."),
            bytes_per_element=torch.finfo(engine.dtype).bits // 8, device=str(engine.device),
            model_path=str(engine.model_path), model_config=engine.model_config, tokenizer=engine.tokenizer,
            decode_mode=engine.executor.decode_mode,
        )
        return backend, info
