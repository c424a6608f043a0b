"""The Workbench inference engine: continuous batching over a paged KV cache, headless (no Qt).

For a reader who knows vLLM (V1), where each of its parts is here. The names were kept rather than
renamed to vLLM's (issue 79 #4); the difference that matters is where the scheduler sits:

- vLLM's `EngineCore` owns the scheduler and steps the model. Here `engine/core.py`'s `EngineCore`
  wraps `engine/llm_engine.py`'s `LLMEngine`, which owns the scheduler and the executor; the core
  adds the rules every driver keeps (refusals at the door, held until warm, a failed step fails
  its requests, ending at stop).
- vLLM's `LLMEngine` / `AsyncLLM` (the front end: input processing, the output processor, a client
  of the core): `workbench/backends/local.py`'s `LocalBackend` in process, and `workbench serve`
  (`workbench/server/`: the HTTP process, the core in its own behind ZeroMQ).
- `EngineCoreClient`: `workbench/server/engine_client.py`'s, serve's client across ZeroMQ.
- `Scheduler`: `engine/scheduling/scheduler.py` (one token budget per step, chunked prefill, and
  a long-prompt queue of its own).
- `KVCacheManager` / `BlockPool`: `engine/scheduling/block_manager.py`'s `BlockManager` (prefix
  caching by chained block hashes, as vLLM's).
- `Request`: `engine/requests/sequence.py`'s `Sequence`; `SchedulerOutput`:
  `engine/scheduling/batch.py`'s `ScheduledBatch`.
- `Executor` / `GPUModelRunner`: `engine/execution/executor.py`'s `ModelExecutor` (`TorchExecutor`,
  or `engine/simulation/`'s `SimulatedExecutor` on simulated GPUs).
- The output processor's `Detokenizer`: `engine/requests/detokenizer.py`'s
  `IncrementalDetokenizer`, run in the engine's process.
- `EngineArgs` / `VllmConfig`: `engine/configuration/config.py`'s `EngineConfig` (vLLM's setting
  names wherever vLLM has the setting); `SamplingParams` and `RequestOutput` keep their names.
"""

from engine.configuration.config import EngineConfig
from engine.errors import ConfigError, EngineError, ModelLoadError
from engine.llm_engine import LLMEngine
from engine.requests.metrics import Percentiles, RequestMetrics, StepStats, percentiles
from engine.requests.outputs import RequestOutput, StepResult
from engine.requests.sampling_params import SamplingParams

__all__ = [
    "ConfigError",
    "EngineConfig",
    "EngineError",
    "LLMEngine",
    "ModelLoadError",
    "Percentiles",
    "RequestMetrics",
    "RequestOutput",
    "SamplingParams",
    "StepResult",
    "StepStats",
    "percentiles",
]
