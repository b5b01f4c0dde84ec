"""The yardsticks on a tiny corpus with an unseen-task split: the unseen rows come from the unseen
HMMs, the prior-level yardstick parts from the mixture's Bayes predictor where the mixture cannot
know the HMM, and each rung of the in-context ladder is its direct predictor at its order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import hmm_datasets
from hmm_datasets.bayes import BayesOptimalPredictor
from hmm_datasets.particle import ParticlePriorPredictor
from hmm_datasets.predictors import (
    IN_CONTEXT,
    MAX_ORDER,
    in_context_predictor,
    ngram_next_token_probs,
    ppm_next_token_probs,
    reference_predictors,
)

NUM_UNSEEN = 8  # as many unseen HMMs as the tiny mixture has: task u of each is comparable


@pytest.fixture(scope="module")
def corpus():
    return hmm_datasets.open_corpus(hmm_datasets.get_preset("tiny", num_test_unseen=NUM_UNSEEN))


def _log_likelihood(params, input_ids: np.ndarray, tasks: np.ndarray, delimiter: int) -> np.ndarray:
    """`[B]`: log P(row | HMM tasks[b]) by the forward algorithm written out in float64, every
    segment restarting from the initial distribution."""
    out = np.zeros(len(input_ids))
    for b, (row, task) in enumerate(zip(input_ids, tasks)):
        initial = params.initial[task].astype(np.float64)
        transitions = params.transitions[task].astype(np.float64)
        emissions = params.emissions[task].astype(np.float64)
        alpha = None
        for token in row:
            if token == delimiter:
                alpha = None
                continue
            joint = (initial if alpha is None else alpha @ transitions) * emissions[:, token]
            out[b] += np.log(joint.sum())
            alpha = joint / joint.sum()
    return out


def test_unseen_rows_are_likelier_under_their_own_hmm_than_under_the_mixtures(corpus):
    rows = corpus.rows("test_unseen")
    assert rows.input_ids.shape[0] == NUM_UNSEEN and rows.params is corpus.unseen_params
    assert corpus.params.num_tasks == corpus.unseen_params.num_tasks == NUM_UNSEEN
    delimiter = corpus.config.delimiter
    own = _log_likelihood(corpus.unseen_params, rows.input_ids, rows.task_ids, delimiter)
    same_index = _log_likelihood(corpus.params, rows.input_ids, rows.task_ids, delimiter)
    assert np.all(np.isfinite(own))
    assert own.sum() > same_index.sum() + 10.0 * len(own)  # nats, summed over rows
    # and better than any single HMM of the mixture: the rows were not drawn from the mixture
    every = [
        _log_likelihood(corpus.params, rows.input_ids, np.full(len(own), task), delimiter)
        for task in range(corpus.params.num_tasks)
    ]
    assert own.sum() > np.max(every, axis=0).sum() + 5.0 * len(own)
    # the control: the test rows are likelier under the mixture's HMM of their task than under
    # the unseen one of that index
    test = corpus.rows("test", 16)
    mixture_own = _log_likelihood(corpus.params, test.input_ids, test.task_ids, delimiter)
    other = _log_likelihood(corpus.unseen_params, test.input_ids, test.task_ids, delimiter)
    assert mixture_own.sum() > other.sum()


def _scored(ids: torch.Tensor, corpus) -> torch.Tensor:
    """`[B, L - 1]`: positions of the test sequence whose next token is an observation."""
    layout = corpus.layout
    late = torch.as_tensor(layout.segment_ids() == layout.num_demos)[:-1]
    return late[None] & (ids[:, 1:] != corpus.config.delimiter)


def _check_distributions(probs: torch.Tensor, ids: torch.Tensor, corpus) -> None:
    assert probs.shape == (*ids.shape, corpus.config.vocab_size + 1)
    assert torch.isfinite(probs).all() and (probs >= 0).all()
    torch.testing.assert_close(
        probs.double().sum(-1), torch.ones(ids.shape, dtype=torch.float64), atol=1e-5, rtol=0
    )


def _next_token_loss(probs: torch.Tensor, ids: torch.Tensor, scored: torch.Tensor) -> float:
    picked = probs[:, :-1].double().gather(-1, ids[:, 1:, None]).squeeze(-1)
    return float(-torch.log(picked)[scored].mean())


def test_the_prior_yardstick_parts_from_mixture_bayes_on_unseen_rows(corpus):
    particle = ParticlePriorPredictor(corpus.config, num_particles=256, seed=0)
    bayes = BayesOptimalPredictor(corpus.params, device="cpu")
    loss = {}
    for split in ("test_unseen", "test"):
        rows = corpus.rows(split, NUM_UNSEEN)
        ids = torch.as_tensor(rows.input_ids)
        prior, mixture = particle.next_token_probs(ids), bayes.next_token_probs(ids)
        _check_distributions(prior, ids, corpus)
        _check_distributions(mixture, ids, corpus)
        scored = _scored(ids, corpus)
        assert scored.sum() > 50
        if split == "test_unseen":
            total_variation = 0.5 * (prior[:, :-1] - mixture[:, :-1].double()).abs().sum(-1)
            assert float(total_variation[scored].mean()) > 0.1
        loss[split] = {
            "prior": _next_token_loss(prior, ids, scored),
            "mixture": _next_token_loss(mixture, ids, scored),
        }
    # where the HMM is new the prior-level predictor predicts better than the mixture's, which
    # must be wrong about it; on the mixture's own HMMs the mixture's predictor is the better one
    assert loss["test_unseen"]["prior"] < loss["test_unseen"]["mixture"] - 0.1, loss
    assert loss["test"]["mixture"] < loss["test"]["prior"] - 0.1, loss


def test_each_ladder_rung_is_its_direct_predictor_at_its_order(corpus):
    V = corpus.config.vocab_size
    rows = corpus.rows("test", 16)
    ids, tasks = torch.as_tensor(rows.input_ids), rows.task_ids
    direct = {"ngram": ngram_next_token_probs, "ppm": ppm_next_token_probs}
    every_order = {
        kind: {order: function(ids, V, order) for order in range(1, MAX_ORDER + 1)}
        for kind, function in direct.items()
    }
    registry, rungs = reference_predictors(corpus.params), {}
    for name, (label, kind, order) in IN_CONTEXT.items():
        rung = in_context_predictor(name, V)
        assert rung.name == name and rung.label == label
        # the order the name and label state is the order the rung runs at
        assert name.startswith("ppm") == (kind == "ppm"), name
        assert order == ({"unigram": 1, "bigram": 2, "trigram": 3}.get(name) or int(name.removeprefix(kind)))
        assert order < 3 or f"order {order}" in label, name
        rungs[name] = rung.next_token_probs(ids, tasks)
        assert torch.equal(rungs[name], every_order[kind][order]), name
        assert torch.equal(registry[name].next_token_probs(ids, tasks), rungs[name]), name
        for other in range(1, MAX_ORDER + 1):  # a rung at another order would be caught
            if other != order:
                assert not torch.allclose(rungs[name], every_order[kind][other]), (name, other)
        _check_distributions(rungs[name], ids, corpus)
    for a, b in itertools.combinations(rungs, 2):
        assert not torch.allclose(rungs[a], rungs[b]), (a, b)
