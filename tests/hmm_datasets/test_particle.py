"""The particle-learning prior-level predictor against exact answers on tiny priors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import hmm_datasets
from hmm_datasets.particle import ParticlePriorPredictor, particle_convergence
from hmm_datasets.sampler import SamplingTables, generate_rows


def _config(**overrides):
    return hmm_datasets.get_preset("tiny", **overrides)


def _polya(counts, concentration: float) -> float:
    """log P of a sequence with these counts under a Dirichlet-multinomial (Polya urn)."""
    counts = np.asarray(counts, dtype=float)
    total = concentration * counts.size
    return (
        math.lgamma(total)
        - math.lgamma(total + counts.sum())
        + sum(math.lgamma(concentration + n) - math.lgamma(concentration) for n in counts)
    )


def _marginal(tokens, config) -> float:
    """P(tokens): the sum over every state path, and with `emission_mixing` m over which tokens
    the drawn rows emitted (the others uniform, m / V each), of the Polya-urn likelihood."""
    S, V, m = config.num_states, config.vocab_size, config.emission_mixing
    observed = [t for t in tokens if t != V]
    starts = [i == 0 or tokens[i - 1] == V for i, t in enumerate(tokens) if t != V]
    sources = [(True,)] * len(observed) if m == 0 else [(True, False)] * len(observed)
    total = 0.0
    for path in itertools.product(range(S), repeat=len(observed)):
        init, trans = np.zeros(S), np.zeros((S, S))
        for k, state in enumerate(path):
            if starts[k]:
                init[state] += 1
            else:
                trans[path[k - 1], state] += 1
        log_path = _polya(init, config.initial_concentration)
        log_path += sum(_polya(trans[s], config.transition_concentration) for s in range(S))
        for from_row in itertools.product(*sources):
            emit = np.zeros((S, V))
            for state, token, row in zip(path, observed, from_row):
                emit[state, token] += row
            log_p = log_path + sum(_polya(emit[s], config.emission_concentration) for s in range(S))
            rows = sum(from_row)
            log_p += rows * math.log1p(-m) + (len(observed) - rows) * (math.log(m / V) if m else 0.0)
            total += math.exp(log_p)
    return total


def _exact_probs(tokens, config) -> np.ndarray:
    """`[L, V]`: P(next observation | tokens 0..i) by brute force."""
    V = config.vocab_size
    out = np.zeros((len(tokens), V))
    for i in range(len(tokens)):
        prefix = list(tokens[: i + 1])
        out[i] = [_marginal(prefix + [v], config) for v in range(V)]
        out[i] /= _marginal(prefix, config)
    return out


def test_one_state_is_dirichlet_multinomial():
    config = _config(num_states=1, vocab_size=4, emission_concentration=0.3)
    ids = torch.tensor([[0, 1, 1, 4, 2, 0, 1, 4, 3, 3, 1], [2, 2, 2, 4, 2, 3, 0, 4, 1, 0, 0]])
    probs = ParticlePriorPredictor(config, num_particles=3, seed=5).next_token_probs(ids)
    assert probs.shape == (2, 11, 5) and probs.dtype == torch.float64
    observed = torch.nn.functional.one_hot(ids, 5)[..., :4].double().cumsum(1)
    expected = (0.3 + observed) / (4 * 0.3 + observed.sum(-1, keepdim=True))
    next_is_delim = ids[:, 1:] == 4
    keep = torch.ones_like(ids, dtype=torch.bool)
    keep[:, :-1] = ~next_is_delim
    torch.testing.assert_close(probs[..., :4][keep], expected[keep], rtol=0, atol=1e-12)
    assert torch.all(probs[:, :-1][next_is_delim][:, 4] == 1)


def test_matches_brute_force_and_seeds_differ():
    config = _config(num_states=2, vocab_size=3)
    tokens = [0, 1, 1, 3, 2, 1]
    exact = _exact_probs(tokens, config)
    estimates = [
        ParticlePriorPredictor(config, 20_000, seed).next_token_probs(torch.tensor([tokens]))[0]
        for seed in (0, 1)
    ]
    for estimate in estimates:
        observation_next = [i for i in range(len(tokens)) if i + 1 == len(tokens) or tokens[i + 1] != 3]
        tv = 0.5 * np.abs(estimate[observation_next, :3].numpy() - exact[observation_next]).sum(-1)
        assert tv.max() < 0.01, tv
        assert estimate[2].tolist() == [0, 0, 0, 1]  # the delimiter comes next: certain
    assert not torch.equal(estimates[0], estimates[1])


def test_emission_mixing_matches_brute_force_and_leaves_the_unmixed_stream_alone():
    config = _config(num_states=2, vocab_size=3, emission_mixing=0.4)
    tokens = [0, 1, 1, 3, 2, 1]
    exact = _exact_probs(tokens, config)
    estimate = ParticlePriorPredictor(config, 20_000, 0).next_token_probs(torch.tensor([tokens]))[0]
    observation_next = [i for i in range(len(tokens)) if i + 1 == len(tokens) or tokens[i + 1] != 3]
    tv = 0.5 * np.abs(estimate[observation_next, :3].numpy() - exact[observation_next]).sum(-1)
    assert tv.max() < 0.01, tv
    unmixed = _exact_probs(tokens, _config(num_states=2, vocab_size=3))
    assert np.abs(exact - unmixed)[observation_next].max() > 0.05  # the mixing is seen
    everything = ParticlePriorPredictor(_config(emission_mixing=1.0), 8, 0)
    uniform = everything.next_token_probs(torch.tensor([[0, 1, 2, 6, 3]]))[0, [0, 1, 3, 4], :6]
    torch.testing.assert_close(uniform, torch.full_like(uniform, 1 / 6), rtol=0, atol=1e-12)


def test_same_convention_as_bayes():
    config = _config(num_tasks=2)
    params = hmm_datasets.sample_hmm_params(config)
    ids = generate_rows(config, SamplingTables.from_params(params), "test", 0, 2)["input_ids"]
    bayes = hmm_datasets.BayesOptimalPredictor(params, dtype=torch.float64).next_token_probs(ids)
    particle = ParticlePriorPredictor(config, 16).next_token_probs(ids)
    assert particle.shape == bayes.shape
    torch.testing.assert_close(particle.sum(-1), torch.ones(bayes.shape[:2], dtype=torch.float64))
    torch.testing.assert_close((particle[..., -1] == 1), (bayes[..., -1] == 1))


def test_spread_shrinks_with_particles():
    config = _config()
    params = hmm_datasets.sample_hmm_params(config)
    ids = generate_rows(config, SamplingTables.from_params(params), "test", 0, 4)["input_ids"]
    few, many = (particle_convergence(config, ids, n) for n in (64, 4096))
    assert many["spread"]["kl_symmetric"] < few["spread"]["kl_symmetric"] / 4
    assert few["num_particles"] == 64 and few["num_positions"] == 4 * (51 - 4)
    assert few["label"].startswith("NOT CONVERGED") and few["converged"] is False


@pytest.mark.parametrize(
    "config, num_particles, match",
    [
        (_config(transition_rank=2), 8, "transition_rank=2"),
        (_config(), 0, "num_particles=0"),
        (_config(), 2.5, "num_particles=2.5"),
    ],
)
def test_bad_input_is_one_line(config, num_particles, match):
    with pytest.raises(ValueError, match=match) as error:
        ParticlePriorPredictor(config, num_particles)
    assert "\n" not in str(error.value)
