"""What the window connects to: the in-process engine for a model or a simulated GPU, or a server
for a URL ("http://127.0.0.1:8000"), each with what the window may show about it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engine import EngineConfig, LLMEngine
from engine.configuration.memory import GPU_MEMORY_UTILIZATION, MemoryLine
from engine.errors import ConfigError
from engine.execution.compile_cache import CompileProgress
from engine.loading.model_file import ModelSource, ProgressCallback
from engine.loading.model_source import read_model, read_tokenizer
from engine.loading.tokenizer import Tokenizer
from engine.model_spec.model_config import ModelConfig
from engine.platform.device import dtype_name, total_memory_bytes
from engine.quantization import weight_format
from engine.simulation import SimulatedTarget, is_simulated, watched_in_real_time
from engine.simulation.catalogue import hardware_profile
from engine.simulation.parallel import Parallelism, per_gpu_lines
from workbench.backends.deployment import is_deployment
from workbench.backends.local import LocalBackend
from workbench.backends.protocol import Backend, BackendCapabilities
from workbench.backends.remote import DEFAULT_REQUEST_TIMEOUT_S, RemoteBackend
from workbench.quality.ledger import quality_line

SERVER_TOKENIZER = "smollm2-135m"  # prompts for a server are made with this tokenizer unless told otherwise


def is_server_url(model: str) -> bool:
    return model.startswith(("http://", "https://"))


def server_tokenizer(model: str) -> Tokenizer:
    """The tokenizer that makes prompts for a server: the served model's own, read from `model`."""
    tokenizer = read_tokenizer(model)
    if tokenizer is None:
        raise ConfigError(f"tokenizer {model}: that model has no tokenizer to make a server's prompts with")
    return tokenizer


@dataclass
class EngineInfo:
    """What the window may know about the loaded engine (all immutable or thread-safe)."""

    config: EngineConfig
    summary: dict  # capacity and byte counts, all measured (the run log's "engine")
    dtype: str
    kv_cache_dtype: str
    bytes_per_element: int
    device: str
    device_memory_bytes: int  # the device's whole memory (the host's, on a CPU)
    model_path: str
    model_config: ModelConfig
    tokenizer: Tokenizer | None  # decoding is thread-safe (the tokenizers library is immutable)
    # How decode steps run now ("compiled", "eager", "eager (compiling in the background)",
    # "simulated", or why compilation fell back to eager): a string read, safe from any thread.
    decode_mode: Callable[[], str]
    # The background compile's progress while it runs (None otherwise), read from any thread.
    compile_progress: Callable[[], CompileProgress | None]
    capabilities: BackendCapabilities
    quantization: str  # what runs, e.g. "int4 g32 + int8 head"
    quantization_choice: str  # why: "auto: ..." or "chosen in the configuration"
    # What this configuration costs against the file's own weights, from the quality ledger
    # (workbench quality); empty for a simulated engine, which has no weights.
    quality: str
    # A simulated model split across several GPUs: one GPU's memory, each line an estimate with
    # its arithmetic (engine/simulation/parallel.py); empty otherwise.
    per_gpu: list[MemoryLine] = field(default_factory=list)


@dataclass
class ServerInfo:
    """What the window may know about a server it drives."""

    config: EngineConfig  # its model field holds the URL
    name: str  # the URL and the model served
    max_model_len: int
    tokenizer: Tokenizer
    capabilities: BackendCapabilities


class BackendLoader:
    """Builds the window's backends. It keeps the last model file read, so that a new
    configuration of the same model does not read the file again. For a server URL it asks for
    `served_model` (default: the first in /v1/models) and makes prompts with `server_tokenizer`
    (a bundled alias, a .gguf file or a Hugging Face folder)."""

    def __init__(
        self,
        served_model: str | None = None,
        server_tokenizer: str = SERVER_TOKENIZER,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ):
        self.served_model, self.server_tokenizer = served_model, server_tokenizer
        self.request_timeout_s = request_timeout_s
        self._source: ModelSource | None = None
        self._source_model: str | None = None

    def load(self, config: EngineConfig, progress: ProgressCallback) -> tuple[Backend, EngineInfo | ServerInfo]:
        if is_server_url(config.model):
            progress("connect", 0.0)
            backend = RemoteBackend(
                config.model,
                server_tokenizer(self.server_tokenizer),
                model=self.served_model,
                request_timeout_s=self.request_timeout_s,
            )
            progress("connect", 1.0)
            return backend, ServerInfo(
                config, backend.name, backend.max_model_len, backend.tokenizer, backend.capabilities
            )
        if is_deployment(config):
            raise ConfigError(
                f"data_parallel_size = {config.data_parallel_size}, prefill_instances = {config.prefill_instances}: "
                "a deployment of several instances runs headless (workbench bench, sweep, explain); the window "
                "shows one engine, expected the defaults"
            )
        config = watched_in_real_time(config)
        if not is_simulated(config.model) and (self._source is None or self._source_model != config.model):
            self._source, self._source_model = read_model(config.model, progress), config.model
        engine = LLMEngine(config, progress=progress, source=None if is_simulated(config.model) else self._source)
        backend = LocalBackend(engine)
        dtype, kv_cache_dtype = dtype_name(engine.dtype), dtype_name(engine.kv_dtype)
        info = EngineInfo(
            config=config,
            summary=backend.describe()["engine"],
            dtype=dtype,
            kv_cache_dtype=kv_cache_dtype,
            bytes_per_element=torch.finfo(engine.dtype).bits // 8,
            device=str(engine.device),
            device_memory_bytes=total_memory_bytes(engine.device),
            model_path=str(engine.model_path),
            model_config=engine.model_config,
            tokenizer=engine.tokenizer,
            decode_mode=lambda: engine.executor.decode_mode,
            compile_progress=lambda: engine.executor.compile_progress,
            capabilities=backend.capabilities,
            quantization=engine.quantization,
            quantization_choice=engine.quantization_choice,
            per_gpu=_per_gpu_lines(engine),
            quality=""
            if is_simulated(config.model)
            else quality_line(engine.model_path, config.quantization, engine.quantization, dtype, kv_cache_dtype),
        )
        return backend, info


def _per_gpu_lines(engine: LLMEngine) -> list[MemoryLine]:
    """One GPU's memory, for a simulated model split across several GPUs; empty otherwise."""
    config = engine.config
    if not is_simulated(config.model):
        return []
    target = SimulatedTarget.parse(config.model)
    count, single = target.gpu_count, target.gpu
    if count == 1:
        return []
    bits, group_size = weight_format(config.quantization, config.group_size)
    parallelism = Parallelism(config.tensor_parallel_size, config.pipeline_parallel_size)
    memory_bytes = hardware_profile(single).memory_bytes
    lines, _ = per_gpu_lines(
        engine.model_config,
        parallelism,
        memory_bytes,
        bits,
        engine.kv_dtype.itemsize,
        engine.max_model_len,
        config.max_num_batched_tokens,
        config.max_num_seqs,
        group_size,
    )
    # `estimate`'s lines say what could fit beside a 5% allowance; the window shows what this
    # engine holds: its KV cache as allocated, within gpu_memory_utilization (on Llama-3-70B over
    # four H100s, 36.06 GB a GPU where `estimate` says 40.06 GB could fit).
    per_token = parallelism.kv_bytes_per_token_per_gpu(engine.model_config, engine.kv_dtype.itemsize)
    held = engine.kv_capacity_tokens * per_token
    reserve = int(memory_bytes * (1 - GPU_MEMORY_UTILIZATION))
    kept = [line for line in lines if line.name not in ("runtime overhead", "KV cache")]
    return [
        *kept,
        MemoryLine(
            "reserve",
            reserve,
            f"{1 - GPU_MEMORY_UTILIZATION:.0%} of {memory_bytes / 1e9:.1f} GB left unused "
            f"(gpu_memory_utilization {GPU_MEMORY_UTILIZATION:g}, as vLLM's default)",
            measured=False,
        ),
        MemoryLine(
            "KV cache",
            held,
            f"{engine.kv_capacity_tokens:,} tokens allocated x {per_token / 1024:,.0f} KiB a token on one GPU "
            f"= {held / 1e9:.2f} GB",
            measured=False,
        ),
    ]
