"""The in-context ladder on the yardsticks' own rows (`yardsticks.yardstick_ladder`), seen and
unseen tasks, and the command that adds it to a study's yardsticks.json (`hmm-yardstick-ladder`)."""

import json

import pytest
import torch

import hmm_datasets
from hmm_datasets.bayes import BayesOptimalPredictor
from hmm_datasets.corpus import open_corpus
from hmm_datasets.files import write_json
from hmm_datasets.predictors import IN_CONTEXT, in_context_predictor
from hmm_datasets.scoring import next_token_scores
from modeling_hmmroformer.experiments.analyses import yardsticks
from modeling_hmmroformer.experiments.analyses.yardsticks import SPLITS, corpus_yardsticks, yardstick_ladder
from modeling_hmmroformer.experiments.commands.yardstick_ladder import main

ROWS = 12


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory):
    """The tiny corpus with a test_unseen split, exported (the command opens it as a folder)."""
    folder = tmp_path_factory.mktemp("ladder") / "corpus"
    config = hmm_datasets.get_preset("tiny", num_test_unseen=ROWS)
    return hmm_datasets.export_corpus(config, folder, table_rows=0, progress=False)


@pytest.fixture(scope="module")
def unseen_corpus(corpus_folder):
    return open_corpus(str(corpus_folder))


@pytest.fixture(scope="module")
def ladder(unseen_corpus):
    return yardstick_ladder(unseen_corpus, ROWS)


def direct_kl(reference: torch.Tensor, probs: torch.Tensor, ids, corpus) -> float:
    """KL(reference ‖ probs) over test tokens 1..T-1, as `place_model` averages it."""
    return yardsticks.test_token_mean(next_token_scores(probs, ids, reference.double())["kl"], corpus.layout)


def test_every_rung_and_yardstick_is_scored_against_the_oracle_and_the_mixture(ladder):
    predictors = [*IN_CONTEXT, "mixture", "oracle"]  # no prior: its predictions were not given
    assert list(ladder) == list(SPLITS)
    for split in SPLITS:
        references = ladder[split]["references"]
        assert list(references) == ["oracle", "mixture"]
        for reference, kl in references.items():
            assert list(kl) == predictors
            assert all(
                type(value) is float and value >= -1e-6 for value in kl.values()
            )  # float32 predictions
            assert kl[reference] == pytest.approx(0.0, abs=1e-6)
    assert json.loads(json.dumps(ladder)) == ladder


def test_each_entry_is_the_kl_of_that_predictor_on_the_same_rows(unseen_corpus, ladder):
    vocab = unseen_corpus.config.vocab_size
    mixture = BayesOptimalPredictor(unseen_corpus.params)
    for split in SPLITS:
        rows = unseen_corpus.rows(split, ROWS)
        ids = torch.as_tensor(rows.input_ids)
        own = BayesOptimalPredictor(rows.params)  # the rows' own HMMs: the fresh ones on test_unseen
        references = {
            "oracle": own.oracle_next_token_probs(ids, rows.task_ids).float(),
            "mixture": mixture.next_token_probs(ids).float(),
        }
        for reference, probs in references.items():
            for name in IN_CONTEXT:
                rung = in_context_predictor(name, vocab).next_token_probs(ids, rows.task_ids)
                expected = direct_kl(probs, rung, ids, unseen_corpus)
                assert ladder[split]["references"][reference][name] == pytest.approx(expected, rel=1e-9)
            other = "mixture" if reference == "oracle" else "oracle"
            expected = direct_kl(probs, references[other], ids, unseen_corpus)
            assert ladder[split]["references"][reference][other] == pytest.approx(expected, rel=1e-9)


def test_the_oracle_of_unseen_rows_reads_them_with_their_own_hmms(unseen_corpus, ladder):
    rows = unseen_corpus.rows("test_unseen", ROWS)
    assert rows.params is unseen_corpus.unseen_params
    unseen = ladder["test_unseen"]["references"]
    assert unseen["oracle"]["mixture"] > 1e-3  # the mixture knows none of the unseen HMMs
    for name in IN_CONTEXT:
        assert unseen["oracle"][name] != pytest.approx(unseen["mixture"][name], abs=1e-4)


def test_the_best_rung_is_the_one_nearest_each_reference(ladder):
    for split in SPLITS:
        entry = ladder[split]
        assert list(entry["best_in_context"]) == list(entry["references"])
        for reference, best in entry["best_in_context"].items():
            kl = entry["references"][reference]
            assert best in IN_CONTEXT
            assert kl[best] == min(kl[name] for name in IN_CONTEXT)


def test_the_corpus_yardsticks_record_the_ladder_with_the_prior(unseen_corpus, ladder):
    facts, tensors = corpus_yardsticks(unseen_corpus, rows=ROWS, prior_particles=16)
    recorded = facts["ladder"]
    for split in SPLITS:
        references = recorded[split]["references"]
        assert list(references) == ["oracle", "mixture", "prior"]
        assert list(references["oracle"]) == [*IN_CONTEXT, "mixture", "prior", "oracle"]
        assert references["prior"]["prior"] == pytest.approx(0.0, abs=1e-6)
        for reference in ("oracle", "mixture"):  # the same rows and predictions as without the prior
            for name, value in ladder[split]["references"][reference].items():
                assert references[reference][name] == pytest.approx(value, rel=1e-9, abs=1e-12)
    ids = tensors["test/input_ids"]
    prior_kl = direct_kl(tensors["test/prior"], tensors["test/mixture"], ids, unseen_corpus)
    assert recorded["test"]["references"]["prior"]["mixture"] == pytest.approx(prior_kl, rel=1e-9)


def facts_file(tmp_path, **changes) -> tuple:
    """A yardsticks.json of the tiny corpus's study, as the stage writes it (without its ladder)."""
    facts = {
        "rows": {"test": ROWS, "test_unseen": ROWS},
        "num_tasks": 8,
        "prior_particles": 16,
        "convergence": {"test": {"spread": {"kl_symmetric": 0.1 + 0.2}}},
        "labels": {"mixture": "mixture Bayes"},
        **changes,
    }
    path = write_json(tmp_path / "yardsticks.json", facts)
    return path, facts


def test_the_command_adds_the_ladder_and_keeps_every_other_value(tmp_path, corpus_folder, ladder, capsys):
    path, facts = facts_file(tmp_path)
    before = path.read_text()
    assert main(["--yardsticks", str(path), "--corpus", str(corpus_folder)]) == 0
    written = json.loads(path.read_text())
    assert list(written) == [*facts, "ladder"]
    assert {key: value for key, value in written.items() if key != "ladder"} == facts
    assert written["ladder"] == json.loads(json.dumps(ladder))
    assert path.read_text() == json.dumps(written, indent=1) + "\n"
    assert path.read_text().startswith(before[: before.rindex("\n}")])  # the rest of the file as it was
    assert "test_unseen (unseen tasks): nearest rung" in capsys.readouterr().out


@pytest.mark.parametrize(
    "changes, corpus, says",
    [
        ({"num_tasks": 32}, None, "K=32"),
        ({"rows": {"test": 128, "test_unseen": 128}}, None, "rows"),
        ({}, "diversity-32", "K=8"),  # refused before the preset's corpus is generated
        ({}, "tiny", "12 test_unseen rows; tiny gives 0"),  # a preset without unseen tasks
        ({"num_tasks": 32, "rows": {"test": ROWS, "test_unseen": 5}}, "diversity-32", "5 test_unseen rows"),
    ],
)
def test_the_command_refuses_a_corpus_unlike_the_files_in_one_line(
    tmp_path, corpus_folder, capsys, changes, corpus, says
):
    path, _ = facts_file(tmp_path, **changes)
    before = path.read_bytes()
    assert main(["--yardsticks", str(path), "--corpus", corpus or str(corpus_folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert says in err
    assert path.read_bytes() == before


def test_the_command_refuses_a_seed_for_a_corpus_folder(tmp_path, corpus_folder, capsys):
    path, _ = facts_file(tmp_path)
    before = path.read_bytes()
    assert main(["--yardsticks", str(path), "--corpus", str(corpus_folder), "--corpus-seed", "1"]) == 2
    assert "not a preset" in capsys.readouterr().err
    assert path.read_bytes() == before
