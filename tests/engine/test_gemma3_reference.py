"""On the bundled Gemma 3 270M GGUF: the engine's greedy continuations equal transformers'
Gemma3ForCausalLM (loaded from the same file, dequantized to float32) token for token, within and
past the 512-token sliding window, in one batch and through chunked prefill; its SentencePiece
tokenizer gives transformers' ids on a varied text set."""

from __future__ import annotations

import pytest
import torch

from engine import SamplingParams
from engine.loading.sharegpt import load_sharegpt
from tests.engine.transformers_reference import transformers_reference

pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "Question: What is 17 times 23?\nAnswer:",
    "<start_of_turn>user\nWhat is a KV cache?<end_of_turn>\n<start_of_turn>model\n",
    "Translate to French: The weather is nice today.\n",
    "SELECT name, COUNT(*) FROM users",
]

TEXTS = [
    "Hello world",
    "  two spaces\tand a tab\n\nnewlines\r\n",
    "def f(x):\n    return x**2  # squared\n\t\tpass",
    "12345 3.14159 1,000,000 0x1F",
    "naïve café 日本語 😀 Ünïcödé ß ﬁ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math 🤖🧠 ٣٤٥ العربية",
    " leading space",
    "trailing   ",
    "      ",
    "<start_of_turn>user\nhi<end_of_turn>",
    "\x00\x01 control characters",
    "a" * 300,
    '{"key": [1, 2, {"nested": null}]}',
]


@pytest.fixture(scope="module")
def transformers_gemma():
    return transformers_reference("gemma3-270m")


def reference_continuation(model, prompt: list[int], max_tokens: int) -> list[int]:
    with torch.no_grad():
        generated = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False)
    return generated[0, len(prompt) :].tolist()


def test_greedy_continuations_match_transformers(make_gemma_engine, transformers_gemma):
    model, _ = transformers_gemma
    engine = make_gemma_engine()
    prompts = [engine.tokenizer.encode(text) for text in PROMPTS]
    outputs = engine.generate(prompts, SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True))
    for prompt, output in zip(prompts, outputs):
        assert output.token_ids == reference_continuation(model, prompt, 32), engine.tokenizer.decode(prompt)


def test_past_the_sliding_window_through_chunked_prefill(make_gemma_engine, transformers_gemma):
    """A 1,300-token prompt: the local layers see only its last 512 tokens, the global ones all of
    it; prefilled in 256-token chunks, so each chunk reads keys from the cache across the window.
    The local layers' blocks that leave the window are freed after every step; a second prompt
    sharing the first 1,200 tokens reuses both groups' cached blocks and continues as transformers
    does."""
    model, _ = transformers_gemma
    engine = make_gemma_engine(max_num_batched_tokens=256)
    manager = engine.block_manager
    text = "\n\n".join(conversation.reply for conversation in load_sharegpt().conversations[:40])
    prompt = engine.tokenizer.encode(text)[:1300]
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    request_id = engine.add_request(prompt, params)
    window_frees, output = 0, []
    while engine.has_unfinished():
        seq = engine.sequence(request_id)
        result = engine.step()
        output += [token for out in result.outputs for token in out.new_token_ids]
        window_frees += sum(
            len(change.block_ids) for change in result.trace.block_changes if change.cause == "left the sliding window"
        )
        if seq.block_tables:  # one full-attention group of 3 layers, five sliding-window groups of 3
            computed = seq.num_computed_tokens
            every = manager.blocks_to_cover(computed)
            visible = every - max(computed - 511, 0) // 16
            assert len(manager.held_block_ids(seq)) == every + 5 * visible
    assert output == reference_continuation(model, prompt, 12)
    # At the last step, 1,311 tokens computed: 82 blocks in the full-attention group; in each window
    # group the 50 before position 800 (the next query sees 800..1311) were freed, 32 held.
    assert window_frees == 5 * 50
    again = prompt[:1200] + engine.tokenizer.encode(" And now something else entirely: the weather.")
    (second,) = engine.generate([again], params)
    assert engine.block_manager.prefix_hit_tokens == 1200
    assert second.token_ids == reference_continuation(model, again, 12)


def test_tokenizer_matches_transformers(make_gemma_engine, transformers_gemma):
    _, reference = transformers_gemma
    tokenizer = make_gemma_engine().tokenizer
    for text in TEXTS:
        ids = tokenizer.encode(text)
        assert ids == reference.encode(text), repr(text)
        assert tokenizer.decode(ids, skip_special_tokens=False) == reference.decode(ids), repr(text)


def test_bos_once_and_the_gemma_turn_format(make_gemma_engine):
    tokenizer = make_gemma_engine().tokenizer
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi there"}])
    assert prompt == "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"
    ids = tokenizer.encode(prompt)
    assert ids[:2] == [2, tokenizer.backend.token_to_id("<start_of_turn>")]  # one BOS, the template's
    assert tokenizer.encode("Hi")[0] == 2
    assert tokenizer.decode(tokenizer.encode("a\nb\tc")) == "a\nb\tc"  # "\n" is user-defined, not special
