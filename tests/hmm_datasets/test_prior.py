"""The prior-level yardstick: Bayes over fresh draws from the HMM prior, and its convergence rule."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from hmm_datasets import BayesOptimalPredictor, SamplingTables, generate_rows, get_preset, sample_hmm_params
from hmm_datasets.memory import masked_mean, scored_positions
from hmm_datasets.params import _PARAMS_SEED_KEY
from hmm_datasets.prior import (
    CONVERGENCE_TOLERANCE,
    PRIOR_SEED_KEY,
    converged,
    convergence,
    convergence_label,
    measure_convergence,
    per_position_kl,
    predictor_over_draws,
    prior_draws,
    prior_level_predictor,
    prior_level_probs,
)
from hmm_datasets.scoring import next_token_scores

EXACT = {"device": "cpu", "dtype": torch.float64}


@pytest.fixture(scope="module")
def tiny():
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 64)
    return config, params, rows


def same_hmm(a, i, b, j) -> bool:
    return all(
        np.array_equal(getattr(a, name)[i], getattr(b, name)[j])
        for name in ("initial", "transitions", "emissions")
    )


@pytest.mark.parametrize("rank", [None, 2])
def test_given_the_training_hmms_as_draws_it_is_mixture_bayes(rank):
    config = get_preset("tiny", transition_rank=rank)
    params = sample_hmm_params(config)
    assert np.all(params.task_prior == params.task_prior[0])  # tiny's mixture prior is uniform
    ids = generate_rows(config, SamplingTables.from_params(params), "test", 0, 32)["input_ids"]
    mixture = BayesOptimalPredictor(params, **EXACT).next_token_probs(ids)
    torch.testing.assert_close(
        predictor_over_draws(params, **EXACT).next_token_probs(ids), mixture, rtol=0, atol=1e-12
    )


def test_draws_get_uniform_weights_whatever_the_mixture_prior_says(tiny):
    config, _, rows = tiny
    skewed = sample_hmm_params(get_preset("tiny", task_prior=(8, 1, 1, 1, 1, 1, 1, 1)))
    uniform = replace(skewed, task_prior=np.full(config.num_tasks, 1 / config.num_tasks, dtype=np.float32))
    ids = rows["input_ids"][:16]
    estimate = predictor_over_draws(skewed, **EXACT).next_token_probs(ids)
    torch.testing.assert_close(
        estimate, BayesOptimalPredictor(uniform, **EXACT).next_token_probs(ids), rtol=0, atol=1e-12
    )
    assert (estimate - BayesOptimalPredictor(skewed, **EXACT).next_token_probs(ids)).abs().max() > 1e-3


def test_copies_of_one_hmm_give_exactly_its_oracle(tiny):
    """A point-mass prior: every draw is the same HMM, so there is nothing to infer but its state."""
    _, params, rows = tiny
    oracle = BayesOptimalPredictor(params, **EXACT)
    for task in np.unique(rows["task_id"]):
        ids = rows["input_ids"][rows["task_id"] == task]
        copies = replace(
            params,
            task_prior=np.full(5, 0.2, dtype=np.float32),
            **{
                name: np.repeat(getattr(params, name)[task : task + 1], 5, axis=0)
                for name in ("initial", "transitions", "emissions")
            },
        )
        expected = oracle.oracle_next_token_probs(ids, np.full(len(ids), task))
        torch.testing.assert_close(
            predictor_over_draws(copies, **EXACT).next_token_probs(ids), expected, rtol=0, atol=1e-10
        )


def test_draws_are_reproducible_independent_and_none_is_a_mixture_hmm(tiny):
    config, params, _ = tiny
    assert PRIOR_SEED_KEY != _PARAMS_SEED_KEY
    first, again, other = prior_draws(config, 64, 0), prior_draws(config, 64, 0), prior_draws(config, 64, 1)
    assert first.num_tasks == 64 and np.allclose(first.task_prior, 1 / 64)
    for name in ("initial", "transitions", "emissions"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
    assert not any(same_hmm(first, i, other, j) for i in range(64) for j in range(64))
    for draws in (first, other):
        assert not any(same_hmm(draws, i, params, k) for i in range(64) for k in range(params.num_tasks))
    predictor = prior_level_predictor(config, 64, 1, **EXACT)  # the draws, and nothing of the mixture
    assert np.array_equal(predictor.params.emissions, other.emissions)


def test_identical_estimates_are_exactly_zero_apart_and_converged(tiny):
    config, _, rows = tiny
    probs = prior_level_probs(config, rows["input_ids"], 16, 0, **EXACT)
    assert prior_level_probs(config, rows["input_ids"], 16, 0, **EXACT) is probs  # computed once
    same = convergence(
        probs, probs.clone(), scored_positions(torch.as_tensor(rows["input_ids"]), config.delimiter)
    )
    assert same["kl_a_b"] == same["kl_b_a"] == same["kl_symmetric"] == 0.0
    assert same["agreement"] == 1.0
    assert same["num_positions"] == 64 * (
        config.sequence_length - 1 - config.num_demos
    )  # no delimiter is scored
    report = {"num_draws": 16, "spread": same, "tolerance": CONVERGENCE_TOLERANCE}
    assert converged(report) and convergence_label(report) == "converged"


def test_the_kl_is_the_one_scoring_computes(tiny):
    config, params, rows = tiny
    ids = torch.as_tensor(rows["input_ids"])
    mixture = BayesOptimalPredictor(params, **EXACT).next_token_probs(ids)
    estimate = prior_level_probs(config, ids, 16, 0, **EXACT)
    scored = scored_positions(ids, config.delimiter)
    apart = convergence(mixture, estimate, scored)
    scores = next_token_scores(estimate, ids, mixture)
    torch.testing.assert_close(per_position_kl(mixture, estimate), scores["kl"], rtol=1e-12, atol=0)
    assert apart["kl_a_b"] == pytest.approx(masked_mean(scores["kl"], scored), rel=1e-12)
    assert apart["agreement"] == pytest.approx(masked_mean(scores["agreement"], scored), rel=1e-12)
    assert apart["kl_b_a"] == pytest.approx(
        masked_mean(next_token_scores(mixture, ids, estimate)["kl"], scored), rel=1e-12
    )


def test_the_spread_between_two_draws_shrinks_as_the_draws_grow(tiny):
    config, _, rows = tiny
    few = measure_convergence(config, rows["input_ids"], 8, larger=64, **EXACT)
    many = measure_convergence(config, rows["input_ids"], 256, **EXACT)
    assert many["spread"]["kl_symmetric"] < 0.5 * few["spread"]["kl_symmetric"]
    assert many["spread"]["agreement"] > few["spread"]["agreement"]
    assert few["larger"] == {"num_draws": 64, "draw": 2} and few["bias"]["kl_a_b"] > 0
    assert many["bias"] is None and many["larger"] is None
    # tiny's prior needs far more than 256 draws: both are labelled as not converged
    for report in (few, many):
        assert not report["converged"] and report["label"].startswith("NOT CONVERGED")
    assert converged(many, tolerance=1.0)


def test_bad_inputs_say_how_to_fix(tiny):
    config, _, rows = tiny
    ids = rows["input_ids"][:2]
    with pytest.raises(ValueError, match="positive number of HMMs"):
        prior_draws(config, 0)
    with pytest.raises(ValueError, match="non-negative integer"):
        prior_draws(config, 4, draw=-1)
    with pytest.raises(ValueError, match="two different draw numbers"):
        measure_convergence(config, ids, 4, draws=(1, 1))
    with pytest.raises(ValueError, match="must exceed num_draws"):
        measure_convergence(config, ids, 4, larger=4)
    probs = torch.full((2, 5, 7), 1 / 7, dtype=torch.float64)
    with pytest.raises(ValueError, match="same rows"):
        convergence(probs, probs[:1])
    with pytest.raises(ValueError, match="one entry per predicted token"):
        convergence(probs, probs, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="positive KL"):
        converged({"spread": {"kl_symmetric": 0.0}}, tolerance=0)
