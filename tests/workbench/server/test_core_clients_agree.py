"""The engine core's clients (issue 60, "Done when"): the same scripted requests through the core
in-process (the local backend the window and headless runs drive), through serve's core in a
thread of this process, and through serve's core in a process of its own give the same tokens
and the same finish reasons, refusals included. The requests go one at a time, so that every
step has the same batch in all three and greedy decoding cannot differ by batch shape."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from engine import EngineConfig, EngineError, LLMEngine, SamplingParams
from workbench.backends.local import LocalBackend
from workbench.server.core_protocol import EndReason
from workbench.server.engine_client import EngineCoreClient, EngineFailure

SCRIPT = [  # (prompt token ids, sampling parameters)
    ([5, 17, 33, 2, 8, 91, 44, 12, 7, 60, 3, 29, 71], SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)),
    ([1, 2, 3], SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)),
    ([9] * 40, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)),
    ([4, 4, 4, 4], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, seed=7)),
    (None, SamplingParams(max_tokens=4, temperature=0.0)),  # longer than the context: rejected, no tokens
    ([1, 10**6], SamplingParams(max_tokens=4, temperature=0.0)),  # a token id past the vocabulary: refused
]


def run_script(core: EngineCoreClient) -> list[tuple]:
    """Each request's (token ids, finish reason, finish detail), or ("failure", reason, message)."""

    async def one(index: int, prompt: list[int], params: SamplingParams) -> tuple:
        outputs = core.submit(f"r{index}", prompt, params)
        while True:
            output = await outputs.get()
            if isinstance(output, EngineFailure):
                return ("failure", output.reason.value, str(output))
            if output.finished:
                return (tuple(output.token_ids), output.finish_reason, output.metrics.stop_cause)

    async def all_in_order() -> list[tuple]:
        too_long = [3] * (core.max_model_len + 1)
        return [await one(index, prompt or too_long, params) for index, (prompt, params) in enumerate(SCRIPT)]

    return asyncio.run(all_in_order())


def run_script_in_process(backend: LocalBackend) -> list[tuple]:
    """The same, through the Backend protocol's calls (submit, advance) in this thread."""
    outcomes = []
    too_long = [3] * (backend.max_model_len + 1)
    for index, (prompt, params) in enumerate(SCRIPT):
        try:
            request_id = backend.submit(prompt or too_long, params, request_id=f"r{index}", arrival_time=0.0)
        except EngineError as error:  # the in-process client's refusal: add_request raises
            outcomes.append(("failure", EndReason.REFUSED.value, str(error)))
            continue
        ended = None
        while ended is None:
            ended = next((o for o in backend.advance().outputs if o.finished and o.request_id == request_id), None)
        outcomes.append((tuple(ended.token_ids), ended.finish_reason, ended.metrics.stop_cause))
    return outcomes


@pytest.mark.slow  # starts a core process (it loads the model again)
def test_the_in_process_and_the_multiprocess_client_give_the_same_outputs(tiny_llama):
    directory, _ = tiny_llama
    config = EngineConfig(
        model=str(directory), device="cpu", dtype="float32", num_kv_blocks=256, block_size=4, compile_decode="off"
    )
    in_thread = EngineCoreClient.start_in_thread(LLMEngine(config), "tiny")
    try:
        threaded = run_script(in_thread)
    finally:
        in_thread.stop()
    in_process = EngineCoreClient.start_process(dataclasses.replace(config), "tiny")
    try:
        separate = run_script(in_process)
    finally:
        in_process.stop()
    local = LocalBackend(LLMEngine(config))
    try:
        in_this_thread = run_script_in_process(local)
    finally:
        local.close()
    assert threaded == separate == in_this_thread
    assert [len(outcome[0]) for outcome in threaded[:4]] == [6, 1, 12, 8]
    assert threaded[4][:2] == ((), "rejected")
    assert threaded[5][:2] == ("failure", "refused")  # add_request's refusal is the request's output, in both
