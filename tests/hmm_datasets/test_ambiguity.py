"""How much the token tells about the state (`hmm_datasets.ambiguity`), and the emission mixing
that hides it (`emission_mixing`): exact values against brute force, the properties the maths
guarantees, held-out fits that cannot see their own rows."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import hmm_datasets
from hmm_datasets.ambiguity import (
    filter_measures,
    held_out_explained_variance,
    held_out_majority_accuracy,
    parameter_measures,
    position_state_marginals,
)
from hmm_datasets.layout import SampleLayout
from hmm_datasets.sampler import SamplingTables, sample_rows

LEVELS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)


def measures(mixing: float, **overrides) -> dict[str, float]:
    config = hmm_datasets.get_preset("tiny", emission_mixing=mixing, **overrides)
    return parameter_measures(hmm_datasets.sample_hmm_params(config), SampleLayout.from_config(config))


def test_no_mixing_keeps_every_parameter_and_mixing_moves_only_the_emissions():
    plain = hmm_datasets.sample_hmm_params(hmm_datasets.get_preset("tiny"))
    zero = hmm_datasets.sample_hmm_params(hmm_datasets.get_preset("tiny", emission_mixing=0.0))
    mixed = hmm_datasets.sample_hmm_params(hmm_datasets.get_preset("tiny", emission_mixing=0.5))
    for name in ("task_prior", "initial", "transitions", "emissions"):
        assert np.array_equal(getattr(plain, name), getattr(zero, name)), name
    for name in ("task_prior", "initial", "transitions"):
        assert np.array_equal(getattr(plain, name), getattr(mixed, name)), name
    np.testing.assert_allclose(mixed.emissions, 0.5 * plain.emissions + 0.5 / 6, atol=1e-6)
    np.testing.assert_allclose(mixed.emissions.sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("mixing", [-0.1, 1.5, float("nan"), "half"])
def test_a_mixing_outside_0_1_is_one_line(mixing):
    with pytest.raises(ValueError, match=r"emission_mixing=.* must be a share between 0 and 1") as error:
        hmm_datasets.get_preset("tiny", emission_mixing=mixing)
    assert "\n" not in str(error.value)


def test_the_token_tells_less_about_the_state_as_the_mixing_grows_and_nothing_at_1():
    found = [measures(m) for m in LEVELS]
    given_token = [f["state_given_token_entropy"] for f in found]
    assert all(b >= a - 1e-12 for a, b in zip(given_token, given_token[1:]))  # convexity: never falls
    # at 1 every row is uniform up to the float32 rounding of the stored rows
    assert given_token[-1] == pytest.approx(found[-1]["state_entropy"], abs=1e-6)
    assert found[-1]["token_information"] == pytest.approx(0.0, abs=1e-6)
    assert given_token[0] < given_token[-1] - 0.1  # and the tiny prior's token does tell


def test_the_exact_measures_are_the_brute_force_sums_over_positions_states_and_tokens():
    config = hmm_datasets.get_preset("tiny", num_tasks=2, emission_mixing=0.3)
    params = hmm_datasets.sample_hmm_params(config)
    layout = SampleLayout.from_config(config)
    offsets = [o for _ in range(layout.num_demos) for o in range(layout.demo_length)]
    offsets += list(range(layout.test_length))
    entropy = given_token = rule = 0.0
    for task, offset in itertools.product(range(2), offsets):
        state = params.initial[task].astype(np.float64)
        for _ in range(offset):
            state = state @ params.transitions[task].astype(np.float64)
        weight = float(params.task_prior[task]) / float(params.task_prior.sum()) / len(offsets)
        for s in range(config.num_states):
            entropy -= weight * state[s] * np.log(state[s]) if state[s] > 0 else 0.0
        for o in range(config.vocab_size):
            joint = state * params.emissions[task, :, o]
            rule += weight * joint.max()
            for s in range(config.num_states):
                if joint[s] > 0:
                    given_token -= weight * joint[s] * np.log(joint[s] / joint.sum())
    found = parameter_measures(params, layout)
    assert found["state_entropy"] == pytest.approx(entropy, rel=1e-9)
    assert found["state_given_token_entropy"] == pytest.approx(given_token, rel=1e-9)
    assert found["token_rule_accuracy"] == pytest.approx(rule, rel=1e-9)
    marginals, weights = position_state_marginals(params, layout)
    assert weights.sum() == pytest.approx(1.0) and np.allclose(marginals.sum(-1), 1.0)


def test_a_token_that_names_its_state_is_read_exactly():
    config = hmm_datasets.get_preset("tiny", num_tasks=1)
    params = hmm_datasets.sample_hmm_params(config)
    named = params.__class__(
        params.task_prior, params.initial, params.transitions, np.eye(6, dtype=np.float32)[None]
    )
    found = parameter_measures(named, SampleLayout.from_config(config))
    assert found["state_given_token_entropy"] == pytest.approx(0.0, abs=1e-12)
    assert found["token_rule_accuracy"] == pytest.approx(1.0, abs=1e-6)  # float32 initial rows


def test_held_out_fits_read_only_their_fitted_positions():
    groups = np.repeat(np.arange(4), 10)
    targets = np.repeat(np.eye(4), 10, axis=0)
    fit = np.tile(np.arange(10) < 5, 4)
    assert held_out_explained_variance(targets, groups, fit) == pytest.approx(1.0)  # the group fixes it
    assert held_out_majority_accuracy(groups, groups % 2, fit) == 1.0
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(4000, 3))
    random_groups = rng.integers(0, 4, 4000)
    held = held_out_explained_variance(noise, random_groups, np.arange(4000) < 2000)
    assert -0.01 < held < 0.01  # a group that tells nothing explains nothing out of sample
    unseen = held_out_majority_accuracy(
        np.array([0, 0, 0, 1]), np.array([2, 2, 1, 2]), np.array([1, 1, 1, 0], bool)
    )
    assert unseen == 1.0  # a group the fit lacks gets the fit's most frequent label


def test_the_filter_reads_more_of_the_state_than_the_token_and_less_as_it_hides():
    rows_per_task, found = 48, {}
    for mixing in (0.0, 0.5):
        config = hmm_datasets.get_preset("tiny", emission_mixing=mixing)
        params = hmm_datasets.sample_hmm_params(config)
        tasks = np.repeat(np.arange(config.num_tasks), rows_per_task)
        rows = sample_rows(
            SamplingTables.from_params(params),
            SampleLayout.from_config(config),
            config.delimiter,
            tasks,
            np.random.default_rng(0),
        )
        fitted = np.arange(tasks.size) % rows_per_task < rows_per_task // 2
        found[mixing] = filter_measures(params, rows, config.vocab_size, fitted)
        exact = measures(mixing)
        assert found[mixing]["state_given_history_entropy"] < exact["state_given_token_entropy"]
        assert found[mixing]["filter_accuracy"] > found[mixing]["token_rule_accuracy"]
        assert found[mixing]["num_positions"] == (~fitted).sum() * (config.sequence_length - config.num_demos)
    assert found[0.5]["filter_accuracy"] < found[0.0]["filter_accuracy"]
    assert found[0.5]["token_rule_accuracy"] < found[0.0]["token_rule_accuracy"]
