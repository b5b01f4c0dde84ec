import math

import numpy as np
import pytest
import torch

from hmm_datasets import BayesOptimalPredictor, SampleLayout, get_preset, sample_hmm_params
from hmm_datasets.baselines import bigram_next_token_probs, unigram_next_token_probs
from hmm_datasets.icl_metric import InContextMetric
from hmm_datasets.metrics import flatten_scores, in_context_scores, per_position_scores
from hmm_datasets.sampler import SamplingTables, generate_rows


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


def test_a_model_that_is_bayes_agrees_everywhere_with_zero_kl(tiny):
    config, ids, bayes, oracle = tiny
    scores = in_context_scores(torch.log(bayes), ids, bayes, oracle, SampleLayout.from_config(config))
    assert scores["test"]["agreement"] == 1.0
    assert abs(scores["test"]["kl_bayes_model"]) < 1e-9 and abs(scores["test"]["excess_nll"]) < 1e-9
    assert scores["test"]["model_accuracy"] == scores["test"]["bayes_accuracy"]
    assert scores["test"]["oracle_accuracy"] >= scores["test"]["bayes_accuracy"] - 0.05


def test_a_uniform_model_has_kl_log_v_minus_bayes_entropy(tiny):
    config, ids, bayes, oracle = tiny
    width = config.vocab_size + 1
    uniform = torch.full(bayes.shape, -math.log(width), dtype=torch.float64)
    per_position = per_position_scores(uniform, ids, bayes, oracle)
    entropy = -(bayes[:, :-1] * torch.log(bayes[:, :-1].clamp_min(1e-300))).sum(-1)
    torch.testing.assert_close(per_position["kl_bayes_model"], math.log(width) - entropy)


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


def test_evaluate_metric_equals_the_function(tiny):
    config, ids, bayes, oracle = tiny
    log_probs = torch.log_softmax(torch.randn(bayes.shape, generator=torch.Generator().manual_seed(0)), -1)
    layout = SampleLayout.from_config(config)
    expected = in_context_scores(log_probs.float(), ids, bayes, oracle, layout)
    metric = InContextMetric(keep_in_memory=True)
    for start in (0, 16):  # two batches, as in an evaluation loop
        metric.add_batch(
            predictions=log_probs[start : start + 16].float().numpy(),
            references=ids[start : start + 16].numpy(),
        )
    got = metric.compute(
        bayes_probs=bayes,
        oracle_probs=oracle,
        num_demos=layout.num_demos,
        demo_length=layout.demo_length,
        test_length=layout.test_length,
    )
    for name, value in expected["test"].items():
        assert got["test"][name] == pytest.approx(value, abs=1e-6)


def test_unigram_baseline_counts_the_context():
    ids = torch.tensor([[0, 1, 1, 3, 2]])  # vocab 3, delimiter 3
    probs = unigram_next_token_probs(ids, vocab_size=3, smoothing=0.0)
    torch.testing.assert_close(probs[0, 0, :3], torch.tensor([1.0, 0, 0], dtype=torch.float64))
    torch.testing.assert_close(probs[0, 1, :3], torch.tensor([0.5, 0.5, 0], dtype=torch.float64))
    assert probs[0, 2, 3] == 1  # the next token is the delimiter
    torch.testing.assert_close(probs[0, 3, :3], torch.tensor([1 / 3, 2 / 3, 0], dtype=torch.float64))


def test_bigram_baseline_follows_pairs_and_treats_the_delimiter_as_a_context_token():
    ids = torch.tensor([[0, 1, 3, 0, 1, 3, 0]])  # segments "0 1" twice, then "0"
    probs = bigram_next_token_probs(ids, vocab_size=3, backoff=1e-9, smoothing=0.5)
    assert probs[0, 3].argmax() == 1  # after 0 came 1
    assert probs[0, 5].argmax() == 0  # after a delimiter came 0
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 7, dtype=torch.float64))
