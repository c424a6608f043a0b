"""A simulated deployment of several instances (engine/deployment.py) behind the Backend
protocol: data parallelism, and prefill/decode disaggregation as a what-if, for headless runs.

Its steps are the instances' steps in time order, each with the whole deployment's KV blocks and
queues; requests carry where they ran and, disaggregated, when their K/V was sent and arrived
(RequestMetrics). Its instances keep no step traces and no one block map, so those are not exposed.
"""

from __future__ import annotations

import dataclasses

from engine.configuration.config import EngineConfig
from engine.deployment import Deployment
from engine.execution.compile_cache import CompileProgress
from engine.requests.sampling_params import SamplingParams
from workbench.backends.protocol import IN_PROCESS, BackendUpdate, Chat, RequestProgress
from workbench.machine.provenance import environment


def is_deployment(config: EngineConfig) -> bool:
    """Several instances: run as a Deployment rather than one engine."""
    return config.data_parallel_size > 1 or config.prefill_instances > 0


class DeploymentBackend:
    capabilities = dataclasses.replace(IN_PROCESS, block_map=False, step_trace=False)
    idle_wait_is_free = True
    tokenizer = None  # simulated models take token ids

    def __init__(self, config: EngineConfig):
        self.deployment = Deployment(config)
        deployment = self.deployment
        instances = deployment.instances
        prefill = deployment.num_prefill
        # "in-process ...", as the one engine's name: explain tells a server's run by it.
        self.name = (
            f"in-process deployment: {prefill} prefill + {len(instances) - prefill} decode instances"
            if prefill
            else f"in-process deployment: {len(instances)} instances, each prefill and decode"
        )
        self.max_model_len = deployment.max_model_len
        self.vocab_size = deployment.model_config.vocab_size
        self.kv_capacity_tokens = sum(engine.kv_capacity_tokens for engine in instances)
        self.kv_cache_bytes = sum(engine.kv_cache_bytes for engine in instances)
        self.num_kv_blocks = sum(engine.num_kv_blocks for engine in instances)

    def clock(self) -> float:
        return self.deployment.clock()

    def sleep(self, seconds: float) -> None:
        self.deployment.sleep(seconds)

    def describe(self) -> dict:
        deployment = self.deployment
        first = deployment.instances[0]
        return {
            "versions": environment(first),
            "engine": {
                "kv_blocks": self.num_kv_blocks,
                "kv_capacity_tokens": self.kv_capacity_tokens,
                "kv_cache_bytes": self.kv_cache_bytes,
                "kv_bytes_per_token": first.kv_bytes_per_token,
                "kv_groups": first.kv_layout.describe(),
                "weight_bytes": first.weight_bytes * len(deployment.instances),
                "weight_parts": first.weight_parts,
                "max_model_len": self.max_model_len,
                "num_parameters": deployment.model_config.num_parameters,
                "serving_stack": first.config.serving_stack,
                "instances": deployment.roles,
                "instance_kv_blocks": [engine.num_kv_blocks for engine in deployment.instances],
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
        return self.deployment.add_request(
            prompt, params, arrival_time=arrival_time, priority=priority, request_id=request_id
        )

    def abort(self, request_id: str) -> None:
        self.deployment.abort(request_id)

    def has_unfinished(self) -> bool:
        return self.deployment.has_unfinished()

    def advance(self, until: float | None = None) -> BackendUpdate:
        step = self.deployment.step(until)
        return BackendUpdate(outputs=step.outputs, stats=step.stats, scheduled=step.scheduled, failure=step.failure)

    def progress(self, request_id: str) -> RequestProgress | None:
        where = self.deployment.progress(request_id)
        return None if where is None else RequestProgress(*where)

    def warm_up_progress(self) -> CompileProgress | None:
        return None  # nothing compiles

    def stop_background_work(self) -> None:
        """Nothing runs in the background."""

    def close(self) -> None:
        self.deployment.close()

    def problems(self) -> list[str]:
        return []

    def block_owners(self, rows: dict[str, int]) -> None:
        return None

    def window_blocks(self) -> None:
        return None
