"""Continuous batching must not change what a request gets: batch invariance, chunked prefill,
preemption under KV pressure and prefix caching all give the same greedy tokens."""

from __future__ import annotations

import pytest

from engine import SamplingParams

pytestmark = pytest.mark.slow

TEXTS = [
    "Write a haiku about autumn leaves.",
    "What is the difference between a list and a tuple in Python? Explain with an example.",
    "Translate 'good morning' into Spanish.",
    "Summarise the plot of Hamlet in two sentences.",
    "List three uses of a hash map.",
    "Why is the sky blue?",
    "Give me a recipe for pancakes, with quantities for four people and a tip for making them fluffy.",
    "What does a compiler do?",
]
GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)


def chat_prompts(engine, count):
    template = engine.tokenizer.apply_chat_template
    return [
        engine.tokenizer.encode(
            template([{"role": "user", "content": TEXTS[i % len(TEXTS)] + " " * (i // len(TEXTS))}])
        )
        for i in range(count)
    ]


def tokens(outputs):
    return [output.token_ids for output in outputs]


def test_batched_equals_alone_for_16_mixed_length_requests(make_smollm_engine):
    engine = make_smollm_engine()
    prompts = chat_prompts(engine, 16)
    assert len({len(prompt) for prompt in prompts}) > 8  # really mixed lengths
    together = tokens(engine.generate(prompts, GREEDY))
    alone = [engine.generate([prompt], GREEDY)[0].token_ids for prompt in prompts]
    assert together == alone
    assert engine.block_manager.num_used_blocks == 0


def test_chunked_prefill_equals_one_shot_prefill(make_smollm_engine):
    one_shot = make_smollm_engine(max_num_batched_tokens=2048, enable_prefix_caching=False)
    chunked = make_smollm_engine(max_num_batched_tokens=24, enable_prefix_caching=False)
    prompts = chat_prompts(one_shot, 4)
    reference = tokens(one_shot.generate(prompts, GREEDY))
    chunk_sizes = []
    step = chunked.step

    def recording_step():
        result = step()
        chunk_sizes.append(result.stats.prefill_tokens)
        return result

    chunked.step = recording_step
    assert tokens(chunked.generate(prompts, GREEDY)) == reference
    assert max(chunk_sizes) <= 24 and sum(chunk_sizes) == sum(len(p) for p in prompts)


def test_cache_too_small_preempts_and_still_gives_correct_tokens(make_smollm_engine):
    roomy = make_smollm_engine()
    prompts = chat_prompts(roomy, 8)
    reference = tokens(roomy.generate(prompts, GREEDY))
    # Each request needs about 3-4 blocks of 16 tokens; 14 blocks hold only a few at a time.
    tight = make_smollm_engine(num_kv_blocks=14)
    outputs = tight.generate(prompts, GREEDY)
    assert tokens(outputs) == reference
    assert sum(output.metrics.preemptions for output in outputs) > 0
    assert tight.scheduler.num_preemptions == sum(output.metrics.preemptions for output in outputs)
    assert tight.block_manager.num_used_blocks == 0


def test_prefix_caching_hits_on_a_shared_system_prompt_without_changing_outputs(make_smollm_engine):
    system = "You are a meticulous assistant. Answer briefly, cite no sources, and never apologise. " * 2
    cached = make_smollm_engine(enable_prefix_caching=True)
    uncached = make_smollm_engine(enable_prefix_caching=False)
    template = cached.tokenizer.apply_chat_template
    prompts = [
        cached.tokenizer.encode(template([{"role": "system", "content": system}, {"role": "user", "content": text}]))
        for text in TEXTS[:4]
    ]
    reference = tokens(uncached.generate(prompts, GREEDY))
    # The first request fills the cache; the rest, sent after it, reuse its system-prompt blocks.
    first = cached.generate(prompts[:1], GREEDY)
    rest = cached.generate(prompts[1:], GREEDY)
    assert tokens(first + rest) == reference
    manager = cached.block_manager
    assert manager.prefix_hit_tokens >= 3 * 32  # at least two shared blocks for each later request
    assert uncached.block_manager.prefix_hit_tokens == 0
    assert manager.num_used_blocks == 0 and manager.num_cached_free_blocks > 0


def test_same_seed_same_tokens_whatever_the_batch(make_smollm_engine):
    engine = make_smollm_engine()
    prompts = chat_prompts(engine, 6)
    sampled = SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, top_k=50, seed=1234)
    alone = engine.generate([prompts[0]], sampled)[0].token_ids
    together = engine.generate(prompts, [sampled] + [SamplingParams(max_tokens=12, temperature=1.0)] * 5)
    assert together[0].token_ids == alone
    other_seed = engine.generate(
        [prompts[0]], SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, top_k=50, seed=99)
    )
    assert other_seed[0].token_ids != alone


def test_stop_strings_stop_tokens_and_length(make_smollm_engine):
    engine = make_smollm_engine()
    prompt = chat_prompts(engine, 1)[0]
    free = engine.generate([prompt], SamplingParams(max_tokens=24, temperature=0.0))[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 24
    stop_word = free.text.split()[2]
    stopped = engine.generate([prompt], SamplingParams(max_tokens=24, temperature=0.0, stop=[stop_word]))[0]
    assert stopped.finish_reason == "stop" and stop_word not in stopped.text
    assert free.text.startswith(stopped.text)
    third_token = free.token_ids[2]
    by_id = engine.generate([prompt], SamplingParams(max_tokens=24, temperature=0.0, stop_token_ids=[third_token]))[0]
    assert by_id.token_ids == free.token_ids[:3] and by_id.finish_reason == "stop"
    assert by_id.metrics.finish_detail == f"stop token {third_token}"
