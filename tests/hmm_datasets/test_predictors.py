"""The registry of reference predictors and the in-context count baselines."""

import numpy as np
import torch

from hmm_datasets import get_preset, sample_hmm_params
from hmm_datasets.predictors import bigram_next_token_probs, reference_predictors, unigram_next_token_probs
from hmm_datasets.sampler import SamplingTables, generate_rows


def test_every_reference_predictor_gives_distributions_over_the_corpus_tokens():
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 8)
    ids, tasks = torch.as_tensor(rows["input_ids"]).long(), np.asarray(rows["task_id"])
    predictors = reference_predictors(params)
    assert list(predictors) == ["bayes", "oracle", "unigram", "bigram"]
    for name, predictor in predictors.items():
        probs = predictor.next_token_probs(ids, tasks).cpu().double()
        assert predictor.name == name and probs.shape == (*ids.shape, config.vocab_size + 1)
        torch.testing.assert_close(
            probs.sum(-1), torch.ones(ids.shape, dtype=torch.float64), atol=1e-5, rtol=0
        )
    # only the oracle reads the tasks
    other_tasks = (tasks + 1) % config.num_tasks
    bayes, oracle = predictors["bayes"], predictors["oracle"]
    torch.testing.assert_close(bayes.next_token_probs(ids, tasks), bayes.next_token_probs(ids, other_tasks))
    assert not torch.allclose(oracle.next_token_probs(ids, tasks), oracle.next_token_probs(ids, other_tasks))


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
