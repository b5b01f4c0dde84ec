"""The observability coefficient (the paper's Assumption 2): exact values, bounds, brute force."""

import itertools

import numpy as np
import pytest
import torch

from hmm_datasets import get_preset, sample_hmm_params
from hmm_datasets.observability import (
    candidate_directions,
    exact_subsets,
    observability_bounds,
    observability_coefficient,
    observability_exact,
    sum_zero_maps,
)


def random_emissions(count: int, states: int, vocab: int, concentration: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.full(vocab, concentration), size=(count, states))


def ratios(emissions: np.ndarray, x: np.ndarray) -> np.ndarray:
    """`[K, N]`: ||O x||_1 / ||x||_1 for `emissions [K, S, V]` and directions `x [K, N, S]`."""
    return np.abs(x @ emissions).sum(-1) / np.abs(x).sum(-1)


def random_search(emissions: np.ndarray, samples: int, rounds: int = 400, seed: int = 0) -> np.ndarray:
    """`[K]`: the smallest ratio found by brute force: random sum-zero directions (some nearly
    sparse) and every pair of states, then random local steps of shrinking size from the best.
    A value the coefficient can only be below."""
    count, states, _ = emissions.shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, states)) * rng.random((samples, states)) ** 4
    pairs = np.eye(states)[:, None] - np.eye(states)[None]
    x = np.concatenate([x - x.mean(1, keepdims=True), pairs[~np.eye(states, dtype=bool)]])
    found = ratios(emissions, np.broadcast_to(x, (count, *x.shape)))
    best = x[found.argmin(1)] / np.abs(x[found.argmin(1)]).sum(1, keepdims=True)  # [K, S]
    value = found.min(1)
    for size in np.geomspace(0.3, 1e-6, rounds):
        steps = rng.standard_normal((count, 64, states)) * size
        tried = best[:, None] + steps - steps.mean(2, keepdims=True)
        tried_value = ratios(emissions, tried)
        better = tried_value.min(1) < value
        best[better] = tried[better, tried_value[better].argmin(1)]
        best /= np.abs(best).sum(1, keepdims=True)
        value = np.minimum(value, tried_value.min(1))
    return value


def circle_search(emissions: np.ndarray, points: int) -> np.ndarray:
    """`[K]`: for 3 states (sum-zero vectors form a plane), the smallest ratio over `points`
    directions evenly around the circle: brute force to within the grid's spacing."""
    angles = np.linspace(0, np.pi, points, endpoint=False)  # x and -x have the same ratio
    plane = np.array([[1.0, -1.0, 0.0], [1.0, 1.0, -2.0]]) / np.sqrt([[2.0], [6.0]])
    x = np.stack([np.cos(angles), np.sin(angles)], 1) @ plane
    return (np.abs(np.einsum("ns,ksv->knv", x, emissions)).sum(-1) / np.abs(x).sum(1)).min(1)


def test_identity_emissions_give_one():
    assert observability_exact(np.eye(5)[None]) == pytest.approx([1.0], abs=1e-12)
    one_hot = np.eye(7)[[0, 3, 6]][None]  # 3 states, 7 tokens, each state its own token
    assert observability_exact(one_hot) == pytest.approx([1.0], abs=1e-12)
    assert observability_coefficient(np.eye(4)[None])[0] == pytest.approx([1.0])


def test_two_states_emitting_the_same_distribution_give_zero():
    emissions = random_emissions(1, 5, 8, 1.0, seed=1)
    emissions[0, 3] = emissions[0, 1]
    assert observability_exact(emissions).tolist() == [0.0]
    lower, upper = observability_bounds(emissions)
    assert lower.tolist() == upper.tolist() == [0.0]


def test_a_state_emitting_a_mixture_of_others_gives_zero():
    emissions = np.array([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]])  # b = (0, 0, 1), b' = (.5, .5, 0)
    assert observability_exact(emissions).tolist() == [0.0]


def test_two_states_give_the_tv_distance_of_their_rows():
    emissions = np.array([[[0.9, 0.1, 0.0], [0.2, 0.7, 0.1]]])
    assert observability_exact(emissions) == pytest.approx([0.7])  # (0.7 + 0.6 + 0.1) / 2


def test_a_symmetric_noisy_channel_gives_one_minus_its_noise():
    # E = (1 - eps) I + eps/V: O x = (1 - eps) x for every x with sum 0, so gamma = 1 - eps
    eps, states = 0.3, 5
    emissions = ((1 - eps) * np.eye(states) + eps / states)[None]
    assert observability_exact(emissions) == pytest.approx([1 - eps])


@pytest.mark.parametrize(("states", "vocab"), [(4, 3), (6, 4)])
def test_more_states_than_tokens_give_zero(states, vocab):
    emissions = random_emissions(3, states, vocab, 1.0, seed=2)  # O x sums to 0: V - 1 < S - 1 directions
    assert observability_exact(emissions).tolist() == [0.0, 0.0, 0.0]
    lower, upper = observability_coefficient(emissions)
    assert lower.tolist() == upper.tolist() == [0.0, 0.0, 0.0]
    assert np.all(random_search(emissions, samples=20_000) < 1e-6)  # brute force gets there too


@pytest.mark.parametrize(
    ("states", "vocab", "concentration"), [(3, 3, 1.0), (4, 4, 1.0), (4, 5, 0.5), (5, 6, 0.2)]
)
def test_brute_force_finds_the_exact_value_and_never_beats_it(states, vocab, concentration):
    emissions = random_emissions(12, states, vocab, concentration, seed=states)
    exact = observability_exact(emissions)
    searched = random_search(emissions, samples=100_000)
    assert np.all(searched >= exact - 1e-12)  # the exact value is a lower bound of every ratio
    assert np.all(searched <= exact * 1.01 + 1e-9)  # and brute force finds it


def test_the_exact_value_is_the_brute_force_minimum_for_three_states():
    emissions = random_emissions(12, 3, 4, 0.5, seed=6)
    exact = observability_exact(emissions)
    brute = circle_search(emissions, points=400_000)
    assert brute == pytest.approx(exact, rel=1e-4)
    assert np.all(brute >= exact - 1e-12)


@pytest.mark.parametrize(("states", "vocab"), [(4, 4), (5, 7), (6, 6)])
def test_both_spaces_give_the_same_candidates(states, vocab):
    emissions = torch.as_tensor(random_emissions(5, states, vocab, 0.5, seed=vocab))
    tokens = torch.tensor(list(itertools.combinations(range(vocab), states - 2)))
    values = []
    for in_token_space in (False, True):
        x, emitted = candidate_directions(sum_zero_maps(emissions), tokens, in_token_space)
        scale = x.abs().sum(-1, keepdim=True)
        x, emitted = (x / scale).numpy(), (emitted / scale).numpy()
        assert emitted == pytest.approx(x @ emissions.numpy(), abs=1e-10)  # O x, whichever way found
        assert x.sum(-1) == pytest.approx(0.0, abs=1e-10)  # a difference of two distributions
        assert np.take_along_axis(emitted, tokens.numpy()[None], 2) == pytest.approx(0.0, abs=1e-10)
        values.append(np.abs(emitted).sum(-1))
    assert values[0] == pytest.approx(values[1], rel=1e-8)


def test_the_bounds_bracket_the_exact_value_and_coefficient_switches_to_them():
    emissions = random_emissions(16, 6, 9, 0.3, seed=3)
    exact = observability_exact(emissions)
    lower, upper = observability_bounds(emissions)
    assert np.all(lower <= exact + 1e-12) and np.all(exact <= upper + 1e-12)
    assert np.any(lower < upper)
    below, above = observability_coefficient(emissions, max_subsets=exact_subsets(6, 9) - 1)
    assert below.tolist() == lower.tolist() and above.tolist() == upper.tolist()
    same_low, same_high = observability_coefficient(emissions)
    assert same_low.tolist() == same_high.tolist() == exact.tolist()


def test_renaming_states_or_tokens_keeps_the_coefficient():
    emissions = random_emissions(6, 5, 7, 0.3, seed=4)
    rng = np.random.default_rng(5)
    renamed = emissions[:, rng.permutation(5)][:, :, rng.permutation(7)]
    assert observability_exact(renamed) == pytest.approx(observability_exact(emissions), abs=1e-12)


def test_the_small_corpus_is_exact_and_in_range():
    emissions = sample_hmm_params(get_preset("small")).emissions
    assert exact_subsets(12, 16) == 8008
    lower, upper = observability_coefficient(emissions)
    assert lower.tolist() == upper.tolist()
    assert np.all((lower >= 0) & (lower <= 1)) and lower.shape == (32,)


def test_one_state_has_nothing_to_tell_apart():
    assert observability_exact(np.ones((2, 1, 3)) / 3).tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    ("emissions", "message"),
    [
        (np.eye(3), "give a batch of HMMs"),
        (np.ones((1, 2, 3)), "rows must sum to 1"),
        (-np.eye(3)[None], "negative or non-finite"),
        (np.zeros((1, 0, 3)), "must be \\[K, S, V\\]"),
    ],
)
def test_bad_emissions_say_what_is_wrong(emissions, message):
    with pytest.raises(ValueError, match=message):
        observability_coefficient(emissions)


def test_bad_max_subsets_and_too_many_subsets_are_refused():
    with pytest.raises(ValueError, match="max_subsets=-1"):
        observability_coefficient(np.eye(3)[None], max_subsets=-1)
    with pytest.raises(ValueError, match="use observability_coefficient"):
        observability_exact(np.full((1, 20, 40), 1 / 40))
