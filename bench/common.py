"""What both benchmarks need: the fixed workload, engines per option, and the machine's ceilings."""

from __future__ import annotations

import platform
import resource
import time

import torch

from engine import EngineConfig, LLMEngine, SamplingParams, percentiles
from engine.catalogue import measure_this_machine
from engine.device import device_name
from engine.model_source import read_model

OPTIONS = ("none", "int8", "int4")


def peak_resident_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def machine_line() -> str:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return f"{platform.machine()}, {device_name(device)}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}"


def workload(requests: int, prompt_len: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 49152, (requests, prompt_len), generator=generator).tolist()


def engine_run(source, quantization: str, prompts: list[list[int]], output_len: int) -> dict:
    engine = LLMEngine(EngineConfig(quantization=quantization, max_num_seqs=len(prompts), max_num_batched_tokens=2048), source=source)
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    engine.generate([prompts[0][:8]], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))  # warm-up
    start = time.perf_counter()
    outputs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - start
    tokens = sum(len(output.token_ids) for output in outputs)
    return {
        "option": quantization, "output_tok_s": tokens / elapsed, "elapsed_s": elapsed,
        "ttft": percentiles(output.metrics.ttft_ms for output in outputs),
        "tpot": percentiles(output.metrics.tpot_ms for output in outputs),
        "weight_bytes": engine.weight_bytes,
    }


__all__ = ["OPTIONS", "engine_run", "machine_line", "measure_this_machine", "peak_resident_mb", "read_model", "workload"]
