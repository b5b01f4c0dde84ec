"""The yardsticks: mixture Bayes (retrieval), prior-level Bayes (inference), the oracle and the
in-context ladder, on seen- and unseen-task rows, and a model placed between them."""

import pytest
import torch

from hmm_datasets.bayes import BayesOptimalPredictor
from hmm_datasets.config import get_preset
from hmm_datasets.corpus import open_corpus
from modeling_hmmroformer.experiments.analyses.yardsticks import (
    SPLITS,
    YARDSTICKS,
    corpus_yardsticks,
    nearest_learner,
    place_model,
)


@pytest.fixture(scope="module")
def unseen_corpus():
    return open_corpus(get_preset("tiny", num_test_unseen=12))


@pytest.fixture(scope="module")
def yardsticks(unseen_corpus):
    return corpus_yardsticks(unseen_corpus, rows=12, prior_particles=32)


def test_every_yardstick_predicts_both_splits(unseen_corpus, yardsticks):
    facts, tensors = yardsticks
    assert facts["rows"] == {"test": 12, "test_unseen": 12} and facts["prior_particles"] == 32
    for split in SPLITS:
        ids = tensors[f"{split}/input_ids"]
        for name in YARDSTICKS:
            probs = tensors[f"{split}/{name}"]
            assert probs.shape == (*ids.shape, unseen_corpus.config.vocab_size + 1)
            torch.testing.assert_close(probs.sum(-1), torch.ones(ids.shape), atol=1e-5, rtol=0)
        assert set(facts["convergence"][split]) >= {"spread", "converged", "label"}
    # on seen rows the oracle reads each row with its own mixture HMM; on unseen rows with its fresh one
    rows = unseen_corpus.rows("test_unseen", 12)
    assert rows.params is unseen_corpus.unseen_params
    fresh = BayesOptimalPredictor(rows.params).oracle_next_token_probs(rows.input_ids, rows.task_ids)
    torch.testing.assert_close(tensors["test_unseen/oracle"], fresh.float().cpu())
    assert not torch.allclose(tensors["test_unseen/oracle"], tensors["test_unseen/mixture"], atol=1e-3)


def test_a_model_that_is_a_yardstick_is_placed_on_it(unseen_corpus, yardsticks):
    _, tensors = yardsticks
    for learner in ("mixture", "prior"):
        model = {split: tensors[f"{split}/{learner}"].double() for split in SPLITS}
        placed = place_model(model, tensors, unseen_corpus.layout)
        for split in SPLITS:
            assert placed[split]["yardsticks"][learner]["kl"] == pytest.approx(0.0, abs=1e-6)
            assert placed[split]["nearest"] == learner
            assert placed[split]["model_accuracy"] == placed[split]["yardsticks"][learner]["accuracy"]


def test_a_corpus_without_unseen_tasks_is_refused_in_one_line():
    with pytest.raises(ValueError, match="num_test_unseen"):
        corpus_yardsticks(open_corpus("tiny"), rows=4, prior_particles=4)


def test_a_learner_is_nearest_only_by_more_than_the_prior_estimates_spread():
    kl = {"mixture": 1.747, "prior": 1.755}
    assert nearest_learner(kl, spread=0.001) == "mixture"
    assert nearest_learner(kl, spread=0.011) == "tied"  # the lead (0.008) is within the estimate's error
    assert nearest_learner({"mixture": 0.5, "prior": 0.1}, spread=0.011) == "prior"
