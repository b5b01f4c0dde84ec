"""One scoring path: per-position scores, the loop over demonstration counts, the in-context metrics."""

import math

import numpy as np
import pytest
import torch

from hmm_datasets import BayesOptimalPredictor, SampleLayout, get_preset, keep_last_demos, sample_hmm_params
from hmm_datasets.predictors import Predictor
from hmm_datasets.sampler import SamplingTables, generate_rows
from hmm_datasets.scoring import (
    demo_counts_for,
    flatten_scores,
    in_context_scores,
    next_token_scores,
    on_test_tokens,
    scores_by_demo_count,
)


@pytest.fixture(scope="module")
def tiny():
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 32)
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    ids = torch.as_tensor(rows["input_ids"]).long()
    bayes = predictor.next_token_probs(ids)
    oracle = predictor.oracle_next_token_probs(ids, rows["task_id"])
    return config, ids, bayes, oracle


def test_demo_counts_are_powers_of_two_up_to_n():
    assert demo_counts_for(0) == [0]
    assert demo_counts_for(1) == [0, 1]
    assert demo_counts_for(8) == [0, 1, 2, 4, 8]
    assert demo_counts_for(6) == [0, 1, 2, 4, 6]


def knows_the_next_token(ids: torch.Tensor, width: int) -> torch.Tensor:
    probs = torch.zeros(*ids.shape, width, dtype=torch.float64)
    probs[:, :-1] = torch.nn.functional.one_hot(ids[:, 1:], width).double()
    probs[:, -1, 0] = 1.0  # the last position predicts nothing scored
    return probs


def test_a_predictor_that_knows_the_next_token_scores_perfectly_and_token_0_needs_context():
    layout = SampleLayout(num_demos=2, demo_length=3, test_length=4)
    ids = torch.as_tensor(np.random.default_rng(0).integers(0, 5, size=(3, layout.sequence_length)))
    scores = next_token_scores(knows_the_next_token(ids, 6), ids)
    assert torch.all(scores["correct"] == 1) and torch.allclose(scores["nll"], torch.zeros(3, 11).double())
    no_demos = on_test_tokens(scores["correct"][:, layout.test_start :], layout.with_demos(0))
    assert torch.isnan(no_demos[:, 0]).all() and torch.all(no_demos[:, 1:] == 1)


def test_a_uniform_predictor_is_log_v_above_bayes_entropy(tiny):
    config, ids, bayes, _ = tiny
    width = config.vocab_size + 1
    uniform = torch.full(bayes.shape, 1 / width, dtype=torch.float64)
    scores = next_token_scores(uniform, ids, bayes)
    entropy = -(bayes[:, :-1] * torch.log(bayes[:, :-1].clamp_min(1e-300))).sum(-1)
    torch.testing.assert_close(scores["kl"], math.log(width) - entropy)
    torch.testing.assert_close(scores["nll"], torch.full_like(scores["nll"], math.log(width)))


def test_the_loop_over_demo_counts_scores_every_predictor_on_the_same_cut_rows(tiny):
    config, ids, _, _ = tiny
    layout, width = SampleLayout.from_config(config), config.vocab_size + 1
    registry = {
        "perfect": Predictor(
            "perfect", "knows the next token", lambda rows, tasks: knows_the_next_token(rows, width)
        ),
        "uniform": Predictor(
            "uniform", "uniform", lambda rows, tasks: torch.full((*rows.shape, width), 1 / width).double()
        ),
    }
    tasks = np.zeros(ids.shape[0], dtype=np.int64)
    scores = scores_by_demo_count(registry, ids, tasks, layout, reference="perfect", progress=False)
    assert list(scores) == [0, 1, 2, 4]
    for m, by_name in scores.items():
        perfect, uniform = by_name["perfect"], by_name["uniform"]
        test = keep_last_demos(ids, layout, m)[:, -layout.test_length :].numpy()
        expected_hits = (test == 0).mean(0)  # a uniform argmax is token 0
        if m == 0:  # test token 0 has no prediction without demonstrations
            assert np.isnan(perfect["correct"][0]) and np.isnan(uniform["correct"][0])
        np.testing.assert_allclose(perfect["correct"][1:], 1.0)
        np.testing.assert_allclose(uniform["correct"][1:], expected_hits[1:])
        np.testing.assert_allclose(uniform["kl"][1:], math.log(width))
        np.testing.assert_allclose(uniform["excess_nll"][1:], math.log(width))
        np.testing.assert_allclose(uniform["agreement"][1:], expected_hits[1:])
        assert "agreement" not in perfect  # the reference is not compared with itself
    chunked = scores_by_demo_count(
        registry, ids, tasks, layout, reference="perfect", batch_size=5, progress=False
    )
    np.testing.assert_allclose(chunked[4]["uniform"]["correct"], scores[4]["uniform"]["correct"])
    with pytest.raises(ValueError, match="reference='bayes' is not among"):
        scores_by_demo_count(registry, ids, tasks, layout, progress=False)


def test_a_model_that_is_bayes_agrees_everywhere_with_zero_kl(tiny):
    config, ids, bayes, oracle = tiny
    scores = in_context_scores(torch.log(bayes), ids, bayes, oracle, SampleLayout.from_config(config))
    assert scores["test"]["agreement"] == 1.0
    assert abs(scores["test"]["kl_bayes_model"]) < 1e-9 and abs(scores["test"]["excess_nll"]) < 1e-9
    assert scores["test"]["model_accuracy"] == scores["test"]["bayes_accuracy"]
    assert scores["test"]["oracle_accuracy"] >= scores["test"]["bayes_accuracy"] - 0.05


def test_breakdowns_cover_the_layout_and_skip_delimiters(tiny):
    config, ids, bayes, oracle = tiny
    layout = SampleLayout.from_config(config)
    scores = in_context_scores(torch.log(bayes), ids, bayes, oracle, layout)
    assert len(scores["by_demos_seen"]["agreement"]) == config.num_demos + 1
    assert len(scores["by_test_position"]["agreement"]) == config.test_length
    # the test mean is the mean over test positions (each scores the same number of rows)
    assert np.isclose(np.mean(scores["by_test_position"]["bayes_accuracy"]), scores["test"]["bayes_accuracy"])
    assert scores["by_demos_seen"]["bayes_accuracy"][-1] == scores["test"]["bayes_accuracy"]
    flat = flatten_scores(scores)
    assert flat["icl/test_agreement"] == 1.0 and "icl/demos_seen_0/agreement" in flat


def test_the_predictor_object_in_place_of_its_probabilities_is_a_clear_error(tiny):
    config, ids, bayes, oracle = tiny
    predictor = BayesOptimalPredictor(sample_hmm_params(config), device="cpu")
    with pytest.raises(
        TypeError, match=r"bayes_probs must be next-token probabilities .*bayes.next_token_probs"
    ):
        in_context_scores(torch.log(bayes), ids, predictor, oracle, SampleLayout.from_config(config))
