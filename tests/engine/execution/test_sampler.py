"""The sampler against exact probabilities: temperature, min-p, top-k and top-p each change the
distribution in a known way, checked on a large seeded sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.execution.sampler import sample
from engine.requests.sampling_params import SamplingParams

LOGITS = np.array([2.0, 1.5, 1.0, 0.0, -1.0, -3.0])
DRAWS = 20_000
# Each frequency of a 20,000-draw sample is within 0.0125 of its probability with probability
# > 99.99% (4.5 standard deviations of a proportion at p = 0.5); the test is seeded, so it is exact.
TOLERANCE = 0.0125


def exact(logits: np.ndarray, temperature=1.0, keep=None) -> np.ndarray:
    scaled = logits / temperature
    probabilities = np.exp(scaled - scaled.max())
    if keep is not None:
        probabilities = probabilities * keep
    return probabilities / probabilities.sum()


def sampled_frequencies(params: SamplingParams) -> np.ndarray:
    logits = torch.tensor(LOGITS, dtype=torch.float32).repeat(DRAWS, 1)
    tokens = sample(logits, [params] * DRAWS, list(range(DRAWS)))
    return np.bincount(tokens, minlength=len(LOGITS)) / DRAWS


def softmax_keep(mask) -> np.ndarray:
    return np.array(mask, dtype=float)


p1 = exact(LOGITS)  # the unfiltered distribution at temperature 1
CASES = {
    "temperature 1": (SamplingParams(temperature=1.0), p1),
    "temperature 0.5": (SamplingParams(temperature=0.5), exact(LOGITS, 0.5)),
    "temperature 2": (SamplingParams(temperature=2.0), exact(LOGITS, 2.0)),
    "top_k 2": (SamplingParams(top_k=2), exact(LOGITS, keep=softmax_keep([1, 1, 0, 0, 0, 0]))),
    # p1 = [.462, .280, .170, .063, .023, .003]: the tokens before the second add up to .462 < 0.7,
    # those before the third to .742 >= 0.7: keep the first two (0.8: the first three).
    "top_p 0.7": (SamplingParams(top_p=0.7), exact(LOGITS, keep=softmax_keep([1, 1, 0, 0, 0, 0]))),
    "top_p 0.8": (SamplingParams(top_p=0.8), exact(LOGITS, keep=softmax_keep([1, 1, 1, 0, 0, 0]))),
    # min_p 0.3: keep p >= 0.3 * p_max = .139: the first three.
    "min_p 0.3": (SamplingParams(min_p=0.3), exact(LOGITS, keep=softmax_keep([1, 1, 1, 0, 0, 0]))),
    # temperature first, then min_p: at T = 0.5, p = [.656, .241, .089, .012, ...]; 0.15 * .656 = .098 keeps two
    # (min_p applied before the temperature would keep three).
    "temperature 0.5 + min_p 0.15": (
        SamplingParams(temperature=0.5, min_p=0.15),
        exact(LOGITS, 0.5, softmax_keep([1, 1, 0, 0, 0, 0])),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sampling_matches_the_exact_distribution(case):
    params, expected = CASES[case]
    assert np.abs(sampled_frequencies(params) - expected).max() < TOLERANCE, (
        case,
        sampled_frequencies(params),
        expected,
    )


def test_the_cases_are_far_enough_apart_to_tell_apart():
    """Each filtered or tempered distribution differs from the plain one by much more than the
    tolerance, so a sampler that ignored the setting would fail its case."""
    for case, (_, expected) in CASES.items():
        if case != "temperature 1":
            assert np.abs(expected - p1).max() > 4 * TOLERANCE, case


def test_greedy_and_the_same_seed_repeat_exactly():
    logits = torch.tensor(LOGITS, dtype=torch.float32).repeat(3, 1)
    assert sample(logits, [SamplingParams(temperature=0.0)] * 3, [1, 2, 3]) == [0, 0, 0]
    random = SamplingParams(temperature=1.0)
    assert sample(logits, [random] * 3, [7, 7, 7]) == [sample(logits[:1], [random], [7])[0]] * 3


def frequencies(logits: list[float], params: SamplingParams, draws: int = 4000) -> np.ndarray:
    rows = torch.tensor(logits, dtype=torch.float32).repeat(draws, 1)
    return np.bincount(sample(rows, [params] * draws, list(range(draws))), minlength=len(logits)) / draws


def test_filters_at_their_exact_boundaries():
    # min_p = 1 keeps exactly the tokens as likely as the most likely one (ties included).
    assert np.abs(frequencies([2.0, 2.0, 1.0], SamplingParams(min_p=1.0)) - [0.5, 0.5, 0.0]).max() < 0.03
    # Four equally likely tokens, top_p = 0.5: the two before reach 0.5 exactly, so the third is dropped.
    assert np.abs(frequencies([0.0, 0.0, 0.0, 0.0], SamplingParams(top_p=0.5)) - [0.5, 0.5, 0.0, 0.0]).max() < 0.03


def test_each_row_of_a_mixed_batch_keeps_its_own_filters():
    logits = torch.tensor(np.stack([LOGITS, LOGITS[::-1], LOGITS]), dtype=torch.float32).repeat(3000, 1)
    params = [SamplingParams(top_k=2), SamplingParams(), SamplingParams(temperature=0.0)] * 3000
    tokens = np.array(sample(logits, params, list(range(len(params))))).reshape(3000, 3)
    assert set(tokens[:, 0]) == {0, 1}  # top-k 2 of the first row
    assert np.abs(np.bincount(tokens[:, 1], minlength=6) / 3000 - p1[::-1]).max() < 0.03  # unfiltered, its own logits
    assert set(tokens[:, 2]) == {0}  # greedy


def test_min_p_is_relative_to_each_rows_own_most_likely_token():
    """Row 2's logits are row 1's minus 5: min_p keeps the same tokens in both (a threshold taken
    from the whole batch's maximum would drop all of row 2 but its best)."""
    row = torch.tensor(LOGITS, dtype=torch.float32)
    logits = torch.stack([row, row - 5.0]).repeat(2000, 1)
    tokens = np.array(sample(logits, [SamplingParams(min_p=0.3)] * 4000, list(range(4000)))).reshape(2000, 2)
    assert set(tokens[:, 0]) == set(tokens[:, 1]) == {0, 1, 2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_picks_what_argmax_picks_with_ties_and_nans(dtype):
    """Greedy takes `max(...).indices` for speed (issue 61): it must pick argmax's token, the
    first of equal maxima, in every row, and a NaN where argmax does. Small integer logits make
    ties in most rows."""
    generator = torch.Generator().manual_seed(5)
    logits = torch.randint(-3, 4, (64, 4096), generator=generator).to(dtype)
    logits[7, 100] = float("nan")
    logits[9] = 1.0  # every token tied
    greedy = [SamplingParams(temperature=0.0)] * 64
    assert sample(logits, greedy, [0] * 64) == torch.argmax(logits, dim=-1).tolist()
