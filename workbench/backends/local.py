"""The in-process engine (real or simulated) behind the Backend protocol: the engine core's
in-process client (engine/core.py), in whatever thread calls `advance()` (the window's engine
thread, or the headless runner's); serve's core process is its multiprocess client. Everything
is exposed: it is the engine itself.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from engine import EngineConfig, LLMEngine
from engine.core import EngineCore
from engine.execution.compile_cache import CompileProgress
from engine.loading.model_file import ModelSource
from engine.requests.sampling_params import SamplingParams
from engine.simulation import is_simulated
from workbench.backends.deployment import DeploymentBackend, is_deployment
from workbench.backends.protocol import (
    BLOCK_CACHED,
    BLOCK_FREE,
    BLOCK_SHARED,
    IN_PROCESS,
    BackendUpdate,
    Chat,
    RequestProgress,
)
from workbench.machine.provenance import environment


class LocalBackend:
    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self.core = EngineCore(engine)
        # Everything, except step traces when the configuration turned them off.
        self.capabilities = (
            IN_PROCESS if engine.config.step_trace else dataclasses.replace(IN_PROCESS, step_trace=False)
        )
        self.name = "in-process engine"  # how it runs is in the header's versions, and in each step
        self.max_model_len = engine.max_model_len
        self.vocab_size = engine.model_config.vocab_size
        self.tokenizer = engine.tokenizer
        self.kv_capacity_tokens = engine.kv_capacity_tokens
        self.kv_cache_bytes = engine.kv_cache_bytes
        self.num_kv_blocks = engine.num_kv_blocks
        self.idle_wait_is_free = engine.idle_wait_is_free

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
                "kv_groups": engine.kv_layout.describe(),
                "weight_bytes": engine.weight_bytes,
                "weight_parts": engine.weight_parts,
                "max_model_len": engine.max_model_len,
                "num_parameters": engine.model_config.num_parameters,
                # A simulated GPU's serving stack, as resolved: the software whose costs it adds.
                **({"serving_stack": engine.config.serving_stack} if is_simulated(engine.config.model) else {}),
            },
        }

    def submit(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str,
        arrival_time: float,
        priority: int = 0,
        messages: Chat | None = None,
    ) -> str:
        return self.core.add_request(
            prompt, params, arrival_time=arrival_time, priority=priority, request_id=request_id
        )

    def abort(self, request_id: str) -> None:
        self.core.abort(request_id)

    def has_unfinished(self) -> bool:
        return self.core.has_unfinished()

    def advance(self, until: float | None = None) -> BackendUpdate:
        """One step of the core. A broken engine (EngineBroken) is raised to the driver, which
        stops using it. Its driver holds what should not run beside the decode graph's compile (a
        headless run waits before it starts, the window holds a Start's run); requests injected
        meanwhile in the window run eagerly, each such step marked `beside_compile`."""
        step = self.core.step()
        if step.failure is not None:
            return BackendUpdate(outputs=step.result.outputs, failure=step.failure)
        result = step.result
        return BackendUpdate(outputs=result.outputs, stats=result.stats, scheduled=result.scheduled, trace=result.trace)

    def progress(self, request_id: str) -> RequestProgress | None:
        seq = self.engine.sequence(request_id)
        if seq is not None:
            return RequestProgress(seq.state, seq.metrics, seq.num_prompt_tokens, seq.num_tokens)
        ended = self.engine.ended_unreported(request_id)  # aborted since the last step: its end comes next
        if ended is None:
            return None
        prompt_tokens = ended.metrics.num_prompt_tokens
        return RequestProgress(ended.finish_reason, ended.metrics, prompt_tokens, prompt_tokens + len(ended.token_ids))

    def warm_up_progress(self) -> CompileProgress | None:
        return self.core.warm_up_progress()

    def stop_background_work(self) -> None:
        """Stop the engine's background compile: the next engine must not be built beside it."""
        self.core.close()

    def close(self) -> None:
        self.core.close()

    def problems(self) -> list[str]:
        return []  # a failed step comes with its update (BackendUpdate.failure)

    def block_owners(self, rows: dict[str, int]) -> np.ndarray:
        manager = self.engine.block_manager
        owners = np.full(manager.num_blocks, BLOCK_FREE)
        for request_id, row in rows.items():
            seq = self.engine.sequence(request_id)
            for block_id in manager.held_block_ids(seq) if seq is not None else ():
                owners[block_id] = BLOCK_SHARED if manager.is_shared(block_id) else row
        owners[manager.cached_free_block_ids()] = BLOCK_CACHED
        return owners

    def window_blocks(self) -> np.ndarray:
        return np.frombuffer(self.engine.block_manager.window_flags, dtype=bool).copy()


def in_process_backend(config: EngineConfig, source: ModelSource | None = None) -> LocalBackend | DeploymentBackend:
    """The engine for `config`, in this process: one engine, or a simulated deployment of several
    instances (data_parallel_size, prefill_instances). `source`: the model file already read."""
    if is_deployment(config):
        return DeploymentBackend(config)
    return LocalBackend(LLMEngine(config, source=source))
