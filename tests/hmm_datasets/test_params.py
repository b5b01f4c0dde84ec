import numpy as np
import pytest

from hmm_datasets import HMMParams, get_preset, sample_hmm_params, task_diagnostics
from hmm_datasets.params import compose_transitions, state_entropy_rate, stationary_distribution


@pytest.fixture(scope="module")
def dense():
    return sample_hmm_params(get_preset("tiny"))


@pytest.fixture(scope="module")
def low_rank():
    return sample_hmm_params(get_preset("tiny", transition_rank=2))


def test_shapes_and_rows_are_stochastic(dense):
    k, s, v = 8, 6, 6
    assert dense.task_prior.shape == (k,)
    assert dense.initial.shape == (k, s)
    assert dense.transitions.shape == (k, s, s)
    assert dense.emissions.shape == (k, s, v)
    for array in (dense.task_prior, dense.initial, dense.transitions, dense.emissions):
        assert np.all(array >= 0)
        np.testing.assert_allclose(array.sum(-1), 1.0, atol=1e-6)


def test_low_rank_transitions_are_the_product_of_their_factors(low_rank):
    assert low_rank.transition_rank == 2
    assert low_rank.transition_left.shape == (8, 6, 2) and low_rank.transition_right.shape == (8, 2, 6)
    product = np.matmul(low_rank.transition_left.astype(np.float64), low_rank.transition_right)
    np.testing.assert_allclose(low_rank.transitions, product, atol=1e-6)
    # A rank-2 factorisation gives rank <= 2 transition matrices.
    assert max(np.linalg.matrix_rank(t, tol=1e-5) for t in low_rank.transitions) <= 2


def test_sampling_is_deterministic_in_the_seed():
    a = sample_hmm_params(get_preset("tiny"))
    b = sample_hmm_params(get_preset("tiny"))
    c = sample_hmm_params(get_preset("tiny", seed=1))
    np.testing.assert_array_equal(a.emissions, b.emissions)
    assert not np.array_equal(a.emissions, c.emissions)


def test_tasks_differ_from_each_other(dense):
    assert not np.allclose(dense.transitions[0], dense.transitions[1])


def test_sparse_concentrations_give_sparse_rows():
    sparse = sample_hmm_params(get_preset("tiny", emission_concentration=0.01))
    flat = sample_hmm_params(get_preset("tiny", emission_concentration=100.0))
    assert sparse.emissions.max(-1).mean() > 0.9 > 0.3 > flat.emissions.max(-1).mean()


@pytest.mark.parametrize("params_name", ["dense", "low_rank"])
def test_save_load_round_trip(params_name, tmp_path, request):
    params = request.getfixturevalue(params_name)
    params.save(tmp_path / "p.safetensors")
    loaded = HMMParams.load(tmp_path / "p.safetensors")
    for name in ("task_prior", "initial", "emissions", "transitions"):
        np.testing.assert_allclose(getattr(loaded, name), getattr(params, name), atol=1e-6)
    assert loaded.transition_rank == params.transition_rank


def test_validation_names_the_problem(dense):
    with pytest.raises(ValueError, match=r"transitions has shape \(8, 6, 5\)"):
        HMMParams(dense.task_prior, dense.initial, dense.transitions[:, :, :5], dense.emissions)
    bad = dense.emissions.copy()
    bad[0, 0] *= 2
    with pytest.raises(ValueError, match="emissions rows must sum to 1"):
        HMMParams(dense.task_prior, dense.initial, dense.transitions, bad)
    with pytest.raises(ValueError, match="task_prior has shape"):
        HMMParams(dense.task_prior[:3], dense.initial, dense.transitions, dense.emissions)
    with pytest.raises(ValueError, match="negative"):
        HMMParams(-dense.task_prior, dense.initial, dense.transitions, dense.emissions)


def test_load_of_a_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="no HMM parameters file"):
        HMMParams.load(tmp_path / "missing.safetensors")


def test_check_matches_rejects_another_corpus(dense):
    dense.check_matches(get_preset("tiny"))
    with pytest.raises(ValueError, match="num_tasks=8 but the corpus config says num_tasks=9"):
        dense.check_matches(get_preset("tiny", num_tasks=9))


def test_stationary_distribution_is_stationary(dense):
    pi = stationary_distribution(dense)
    np.testing.assert_allclose(pi.sum(-1), 1.0, atol=1e-9)
    np.testing.assert_allclose(
        np.einsum("ks,kst->kt", pi, dense.transitions.astype(np.float64)), pi, atol=1e-6
    )


def test_entropy_rate_of_a_deterministic_cycle_is_zero_and_of_a_uniform_chain_is_log_s():
    s = 4
    cycle = np.roll(np.eye(s), 1, axis=1)[None].astype(np.float32)
    uniform = np.full((1, s, s), 1 / s, dtype=np.float32)
    initial = np.full((1, s), 1 / s, dtype=np.float32)
    emissions = np.full((1, s, 2), 0.5, dtype=np.float32)
    prior = np.ones(1, dtype=np.float32)
    assert state_entropy_rate(HMMParams(prior, initial, cycle, emissions)) == pytest.approx([0.0], abs=1e-9)
    assert state_entropy_rate(HMMParams(prior, initial, uniform, emissions)) == pytest.approx(
        [np.log(s)], rel=1e-6
    )


def test_task_diagnostics_have_one_value_per_task(dense):
    diagnostics = task_diagnostics(dense)
    assert diagnostics["stationary"].shape == (8, 6)
    for name in ("state_entropy_rate", "emission_entropy", "top_emission_probability"):
        assert diagnostics[name].shape == (8,)
        assert np.all(np.isfinite(diagnostics[name]))


def test_compose_transitions_is_row_stochastic(low_rank):
    dense = compose_transitions(low_rank.transition_left, low_rank.transition_right)
    np.testing.assert_allclose(dense.sum(-1), 1.0, atol=1e-6)


def test_select_keeps_the_chosen_hmms_and_renormalises_their_prior(low_rank):
    chosen = low_rank.select([3, 1])
    assert chosen.num_tasks == 2
    np.testing.assert_array_equal(chosen.emissions, low_rank.emissions[[3, 1]])
    np.testing.assert_array_equal(chosen.transition_left, low_rank.transition_left[[3, 1]])
    np.testing.assert_allclose(
        chosen.task_prior, low_rank.task_prior[[3, 1]] / low_rank.task_prior[[3, 1]].sum()
    )
