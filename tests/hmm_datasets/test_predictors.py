"""The registry of reference predictors and the in-context ladder (n-grams, PPM)."""

import numpy as np
import pytest
import torch

from hmm_datasets import get_preset, sample_hmm_params
from hmm_datasets.predictors import (
    IN_CONTEXT,
    MAX_ORDER,
    bigram_next_token_probs,
    context_counts,
    ngram_next_token_probs,
    ppm_next_token_probs,
    reference_predictors,
    unigram_next_token_probs,
)
from hmm_datasets.sampler import SamplingTables, generate_rows
from hmm_datasets.scoring import predictor_ladder


def test_every_reference_predictor_gives_distributions_over_the_corpus_tokens():
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 8)
    ids, tasks = torch.as_tensor(rows["input_ids"]).long(), np.asarray(rows["task_id"])
    predictors = reference_predictors(params)
    assert list(predictors) == [*IN_CONTEXT, "bayes", "oracle"]
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
    probs = bigram_next_token_probs(ids, vocab_size=3)
    assert probs[0, 3].argmax() == 1  # after 0 came 1
    torch.testing.assert_close(probs, ngram_next_token_probs(ids, 3, order=2))
    assert probs[0, 5].argmax() == 0  # after a delimiter came 0
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 7, dtype=torch.float64))


# ---- the in-context ladder --------------------------------------------------------------------
def brute_force_counts(row: np.ndarray, vocab: int, length: int) -> np.ndarray:
    """N[i, v]: occurrences of the `length` tokens ending at i, ending at j < i, followed by v."""
    out = np.zeros((len(row), vocab), dtype=np.int64)
    for i in range(length - 1, len(row)):
        context = tuple(row[i - length + 1 : i + 1])
        for j in range(length - 1, i):
            if tuple(row[j - length + 1 : j + 1]) == context and row[j + 1] < vocab:
                out[i, row[j + 1]] += 1
    return out


def brute_force_ngram(row: np.ndarray, vocab: int, order: int) -> np.ndarray:
    """The n-gram of `order`, position by position, by counting in Python."""
    out = np.zeros((len(row), vocab + 1))
    for i in range(len(row)):
        seen = np.bincount(row[: i + 1][row[: i + 1] < vocab], minlength=vocab) + 0.5
        unigram = seen / seen.sum()
        probs = unigram
        for length in range(1, order):
            counts = brute_force_counts(row, vocab, length)[i]
            if counts.sum() > 0:
                probs = (counts + unigram) / (counts.sum() + 1)
        out[i, :vocab] = probs
        if i + 1 < len(row) and row[i + 1] == vocab:  # the layout: a delimiter comes next
            out[i] = np.eye(vocab + 1)[vocab]
    return out


@pytest.mark.parametrize("order", range(1, MAX_ORDER + 1))
def test_each_ngram_order_equals_counting_position_by_position(order):
    rows = np.random.default_rng(order).integers(0, 4, size=(3, 30))  # vocab 3, delimiter 3
    probs = ngram_next_token_probs(rows, vocab_size=3, order=order).numpy()
    for row, predicted in zip(rows, probs):
        np.testing.assert_allclose(predicted, brute_force_ngram(row, 3, order), atol=1e-12)
    for length in range(1, order):
        counts = context_counts(torch.as_tensor(rows), 3, length).numpy()
        assert all((c == brute_force_counts(r, 3, length)).all() for r, c in zip(rows, counts))


def test_ppm_blends_every_context_length_by_its_escape_count():
    ids = torch.tensor([[0, 1, 0, 1, 0, 2, 0]])  # vocab 3; predict after the last "0"
    probs = ppm_next_token_probs(ids, vocab_size=3, order=3)
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 7, dtype=torch.float64))
    unigram = np.array([4, 2, 1]) + 0.5
    unigram = unigram / unigram.sum()
    # length 1: "0" was followed by 1, 1, 2 (3 times, 2 distinct)
    p1 = (np.array([0, 2, 1]) + 2 * unigram) / (3 + 2)
    # length 2: "2 0" was never seen: everything escapes to length 1
    np.testing.assert_allclose(probs[0, 6, :3].numpy(), p1, atol=1e-12)
    # at position 4 ("1 0" seen once, followed by 1): both lengths blend
    unigram4 = np.array([3, 2, 0]) + 0.5
    unigram4 = unigram4 / unigram4.sum()
    p1_4 = (np.array([0, 2, 0]) + 1 * unigram4) / (2 + 1)
    p2_4 = (np.array([0, 1, 0]) + 1 * p1_4) / (1 + 1)
    np.testing.assert_allclose(probs[0, 4, :3].numpy(), p2_4, atol=1e-12)


def test_on_cycles_an_ngram_long_enough_is_exact_after_one_cycle():
    cycle = [0, 1, 0, 2]  # needs the previous 2 tokens: 0 is followed by 1 or 2
    row = np.array([cycle * 6])
    probs = ngram_next_token_probs(row, vocab_size=3, order=3)
    hits = (probs[0, :-1].argmax(-1).numpy() == row[0, 1:])[len(cycle) + 1 :]
    assert hits.all()
    short = ngram_next_token_probs(row, vocab_size=3, order=2)  # one token back is not enough
    assert not (short[0, :-1].argmax(-1).numpy() == row[0, 1:])[len(cycle) + 1 :].all()


def test_on_iid_tokens_every_order_tends_to_the_unigram():
    row = np.random.default_rng(0).choice(3, size=(1, 4000), p=[0.6, 0.3, 0.1])
    for predict in (ngram_next_token_probs, ppm_next_token_probs):
        for order in (2, 4):
            probs = predict(row, vocab_size=3, order=order)[0, -200:, :3]
            np.testing.assert_allclose(probs.mean(0).numpy(), [0.6, 0.3, 0.1], atol=0.05)


def test_an_order_out_of_range_is_refused():
    with pytest.raises(ValueError, match="order=9: an in-context n-gram has an order from 1 to 8"):
        ngram_next_token_probs(np.zeros((1, 4), dtype=int), 3, order=9)


def test_the_ladder_is_ordered_as_measured_and_shows_a_model_below_a_baseline():
    accuracy = {"unigram": 0.35, "trigram": 0.60, "model": 0.55, "bayes": 0.70, "oracle": 0.72}
    ladder = predictor_ladder(accuracy, {}, ["unigram", "trigram"])
    assert [rung["name"] for rung in ladder["rungs"]] == ["unigram", "model", "trigram", "bayes", "oracle"]
    assert ladder["best_in_context"] == "trigram" and ladder["below_in_context"] == {"model": True}
    assert ladder["gap_closed"]["model"] == pytest.approx((0.55 - 0.60) / (0.70 - 0.60))
    above = predictor_ladder({**accuracy, "model": 0.68}, {}, ["unigram", "trigram"])
    assert above["below_in_context"] == {"model": False} and above["gap_closed"]["model"] == pytest.approx(
        0.8
    )
