"""A short terminal demo: load the bundled model, stream a few chats through continuous batching,
and print each request's latency figures. (`make run` shows this until the desktop app lands.)"""

from __future__ import annotations

import sys

from engine import EngineConfig, LLMEngine, SamplingParams, percentiles
from engine.core import EngineCore

QUESTIONS = [
    "What is the capital of France?",
    "Give me three tips for writing clear code.",
    "Explain what a KV cache is in one sentence.",
]


def _progress(stage: str, fraction: float) -> None:
    print(f"\r  {stage:<20} {fraction:5.0%}", end="" if fraction < 1 else "\n", file=sys.stderr, flush=True)


def main() -> None:
    print("Loading the bundled SmolLM2-135M-Instruct (Q4_1 GGUF) ...", file=sys.stderr)
    engine = LLMEngine(EngineConfig(), progress=_progress)
    print(
        f"KV cache: {engine.num_kv_blocks} blocks x {engine.config.block_size} tokens = "
        f"{engine.kv_capacity_tokens} tokens, {engine.kv_cache_bytes / 2**20:.0f} MiB; "
        f"weights {engine.weight_bytes / 2**20:.0f} MiB ({engine.dtype})"
    )
    params = SamplingParams(max_tokens=64, temperature=0.0)
    prompts = {}
    for question in QUESTIONS:
        prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": question}])
        prompts[engine.add_request(prompt, params)] = question
    finished = []
    core = EngineCore(engine)
    while engine.has_unfinished():
        for output in core.step_or_raise().outputs:
            if output.finished:
                finished.append(output)
                print(f"\n[{output.request_id}] {prompts[output.request_id]}\n  -> {output.text.strip()}")
    ttft = percentiles(output.metrics.ttft_ms for output in finished)
    tpot = percentiles(output.metrics.tpot_ms for output in finished)
    print(f"\nTTFT ms: {ttft}\nTPOT ms/token: {tpot}")


if __name__ == "__main__":
    main()
