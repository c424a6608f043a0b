"""Prefix caching is invisible in the tokens: with adversarial prompts (the same block of tokens
at other positions, a block repeated, a prompt that is a prefix of another) a caching engine
gives the uncached engine's greedy tokens, and hits exactly the blocks it should."""

from __future__ import annotations

from engine import SamplingParams
from tests.tiny_models import tiny_engine

GREEDY = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
A, B, C = [10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]  # one block of 4 tokens each
PROMPTS_AND_HITS = [  # (prompt, prompt tokens the cache must serve), in this order
    (A + B + C + [40], 0),
    (B + A + C + [41], 0),  # the same blocks in another order: other positions, other chains
    (A + A + A + [42], 4),  # A at the start is cached; A after A is not A after nothing
    (A + B + [43], 8),  # a prefix of the first prompt
    (A + B + C + [40], 12),  # the first prompt again: all but its last token
    (A + B + C + [40, 50, 51, 52, 53], 12),  # the 4th block differs from the first run's [40, o1, o2, o3]
]


def test_a_caching_engine_gives_the_uncached_tokens_and_the_expected_hits(tiny_llama):
    directory, _ = tiny_llama
    cached = tiny_engine(directory, enable_prefix_caching=True)
    uncached = tiny_engine(directory, enable_prefix_caching=False)
    for prompt, expected_hits in PROMPTS_AND_HITS:
        hits_before = cached.block_manager.prefix_hit_tokens
        with_cache = cached.generate([prompt], GREEDY)[0].token_ids
        assert cached.block_manager.prefix_hit_tokens - hits_before == expected_hits, prompt
        assert with_cache == uncached.generate([prompt], GREEDY)[0].token_ids, prompt
    assert uncached.block_manager.prefix_hit_tokens == 0
