"""The Workbench inference engine: continuous batching over a paged KV cache, headless (no Qt)."""

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
