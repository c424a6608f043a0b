#!/usr/bin/env bash
# GPU check, for a machine with one NVIDIA GPU and no network (about 5 minutes):
#   1. every Triton kernel against its torch reference (the kernel tests, compiled, not interpreted);
#   2. kernel timings (python -m benchmarks.kernel_timings);
#   3. the engine's single-stream decode per quantization option and the 64 x (128 + 128) workload;
#   4. the engine with each 8-bit KV cache (int8, fp8_e4m3): greedy tokens against the bf16 cache's,
#      and the same two workloads (the Triton kernel's scales have run only in the interpreter);
# and prints a short table last. Run from the repository root after `make setup` (or with the
# packages already installed: torch with CUDA, triton, the project in editable mode).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET

echo "== 1. Triton kernels vs references (compiled on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
"$PYTHON" -m pytest -q tests/kernels -p no:cacheprovider

echo "== 2. kernel timings"
"$PYTHON" -m benchmarks.kernel_timings | tee /tmp/gpu_kernels.txt

echo "== 3. engine decode and throughput"
"$PYTHON" - <<'PY' | tee /tmp/gpu_engine.txt
import time, torch
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.loading.model_source import read_model
source = read_model("smollm2-135m")
rows = []
for quantization in ("none", "int8", "int4", "w8a8"):
    engine = LLMEngine(EngineConfig(device="cuda", dtype="bfloat16", quantization=quantization), source=source)
    params = SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True)
    engine.generate([[1] * 16], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))  # warm-up
    start = time.perf_counter(); engine.generate([[1] * 16], params); single = 128 / (time.perf_counter() - start)
    prompts = torch.randint(0, 49152, (64, 128), generator=torch.Generator().manual_seed(0)).tolist()
    start = time.perf_counter(); engine.generate(prompts, params); batch = 64 * 128 / (time.perf_counter() - start)
    rows.append((quantization, single, batch, engine.weight_bytes / 1e6))
print(f"{'quantization':<12} {'decode tok/s (1 stream)':>24} {'output tok/s (64x128+128)':>27} {'weights MB':>11}")
for quantization, single, batch, megabytes in rows:
    print(f"{quantization:<12} {single:>24.1f} {batch:>27.1f} {megabytes:>11.1f}")
PY

echo "== 4. 8-bit KV caches on CUDA"
"$PYTHON" - <<'PY' | tee /tmp/gpu_kv.txt
import time, torch
from engine import EngineConfig, LLMEngine, SamplingParams
from engine.loading.model_source import read_model
source = read_model("smollm2-135m")
params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
prompt = source.tokenizer.encode("The history of the printing press began")
tokens = {}
for kv in ("bfloat16", "int8", "fp8_e4m3"):
    engine = LLMEngine(EngineConfig(device="cuda", dtype="bfloat16", kv_cache_dtype=kv), source=source)
    tokens[kv] = engine.generate([prompt], params)[0].token_ids
    prompts = torch.randint(0, 49152, (64, 128), generator=torch.Generator().manual_seed(0)).tolist()
    start = time.perf_counter(); engine.generate(prompts, params); batch = 64 * 64 / (time.perf_counter() - start)
    same = sum(a == b for a, b in zip(tokens[kv], tokens["bfloat16"]))
    print(f"KV {kv:<9} {engine.kv_capacity_tokens:>9,} tokens  {batch:>8.1f} output tok/s (64 x 128+64)  "
          f"{same}/64 greedy tokens as the bf16 cache's")
PY
