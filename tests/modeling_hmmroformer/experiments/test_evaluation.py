"""Figure 1 evaluation: every curve present, the model scored like the predictors, files written."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import hmm_datasets
from hmm_datasets.ceiling import accuracy_table
from hmm_datasets.predictors import IN_CONTEXT
from model_cards.render import figure1_text
from modeling_hmmroformer import HMMRoFormerConfig, HMMRoFormerForCausalLM
from modeling_hmmroformer.experiments.analyses.evaluation import Figure1Result, figure1, load_evaluation_data
from modeling_hmmroformer.experiments.figures.model import write_figure1

TINY_SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}  # configs/tiny.yaml's model

ROOT = Path(__file__).resolve().parents[3]


class BayesAsModel(torch.nn.Module):
    """A 'model' whose logits are the Bayes-optimal log-probabilities: it must match Bayes exactly."""

    def __init__(self, params):
        super().__init__()
        self.bayes = hmm_datasets.BayesOptimalPredictor(params, device="cpu")
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the module a device

    def forward(self, input_ids):
        probs = self.bayes.next_token_probs(input_ids)
        return type("Output", (), {"logits": torch.log(probs.clamp_min(1e-30))})()


@pytest.fixture(scope="module")
def data():
    return load_evaluation_data("tiny", rows=48)


def test_a_bayes_model_reproduces_the_bayes_curves(data):
    result = figure1(BayesAsModel(data.params), data, progress=False)
    assert result.demo_counts == [0, 1, 2, 4]
    for key in ("accuracy", "early_accuracy"):
        np.testing.assert_allclose(result.by_num_demos["model"][key], result.by_num_demos["bayes"][key])
    assert result.model_vs_bayes["agreement"] == 1.0
    assert result.model_vs_bayes["kl_bayes_model"] == pytest.approx(0.0, abs=1e-5)
    assert list(result.by_test_position) == ["model", *IN_CONTEXT, "bayes", "oracle"]
    assert result.labels["bayes"] == "Bayes-optimal"
    ladder = result.ladder  # a model that is Bayes closes the whole gap to Bayes
    assert (
        ladder["gap_closed"]["model"] == pytest.approx(1.0) and ladder["below_in_context"]["model"] is False
    )
    accuracies = [rung["accuracy"] for rung in ladder["rungs"]]
    assert accuracies == sorted(accuracies) and ladder["best_in_context"] in IN_CONTEXT
    assert len(result.by_test_position["oracle"]) == data.config.test_length


COMMITTED_FIGURE1 = sorted(ROOT.glob("results/**/figure1.json")) + [
    ROOT / "benchmarks/results/figure1_small.json"
]


@pytest.mark.parametrize("path", COMMITTED_FIGURE1, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_figure1_reads_and_writes_back_byte_for_byte(path):
    text = path.read_text()
    assert json.dumps(Figure1Result.from_dict(json.loads(text)).to_dict(), indent=1) + "\n" == text


def test_a_figure1_with_an_unknown_or_a_missing_field_is_refused_naming_it(data):
    written = figure1(BayesAsModel(data.params), data, progress=False).to_dict()
    assert Figure1Result.from_dict(written).to_dict() == written
    with pytest.raises(ValueError, match="no field 'curves'"):
        Figure1Result.from_dict({**written, "curves": {}})
    with pytest.raises(ValueError, match="lacks 'model_vs_bayes'"):
        Figure1Result.from_dict({k: v for k, v in written.items() if k != "model_vs_bayes"})
    older = {k: v for k, v in written.items() if k not in ("labels", "ladder")}  # before they existed
    assert Figure1Result.from_dict(older).label("bayes") == "bayes"


def test_an_untrained_model_is_far_from_bayes_and_files_are_written(data, tmp_path):
    torch.manual_seed(0)
    model = HMMRoFormerForCausalLM(HMMRoFormerConfig(**TINY_SIZES, vocab_size=7))
    result = figure1(model, data, progress=False)
    assert result.model_vs_bayes["kl_bayes_model"] > 0.1
    bayes = result.by_num_demos["bayes"]["early_accuracy"]
    assert bayes[-1] >= bayes[0]  # demonstrations help the yardstick
    paths = write_figure1(result.to_dict(), tmp_path / "fig")
    assert json.loads(paths["json"].read_text())["num_rows"] == 48
    assert paths["png"].stat().st_size > 10_000
    text = figure1_text(result.to_dict())
    assert "bigram early" in text and "KL(Bayes || model)" in text
    assert result.ladder["below_in_context"]["model"] and "(below the in-context baseline)" in text


def test_the_twin_is_scored_beside_the_model_with_excess_kl_by_demonstrations_and_position(data):
    torch.manual_seed(0)
    model = HMMRoFormerForCausalLM(HMMRoFormerConfig(**TINY_SIZES, vocab_size=7))
    torch.manual_seed(1)
    other = HMMRoFormerForCausalLM(HMMRoFormerConfig(**TINY_SIZES, vocab_size=7))
    itself = figure1(model, data, twin=model, progress=False)  # a model as its own twin: the same curves
    assert itself.by_num_demos["twin"] == itself.by_num_demos["model"]
    assert itself.kl_bayes_by_num_demos["twin"] == itself.kl_bayes_by_num_demos["model"]
    result = figure1(model, data, twin=other, progress=False)
    assert result.kl_bayes_by_num_demos["twin"] != result.kl_bayes_by_num_demos["model"]
    assert result.labels["twin"] == "untrained twin"
    kl = result.kl_bayes_by_num_demos
    assert "bayes" not in kl and len(kl["model"]) == len(result.demo_counts)
    assert min(kl["model"]) > 0.05 and min(kl["oracle"]) >= 0  # an untrained model is far from Bayes
    by_position = result.kl_bayes_by_test_position["model"]
    assert len(by_position) == data.config.test_length
    assert np.nanmean(by_position[1:]) == pytest.approx(kl["model"][-1])


def test_figure1_and_the_dataset_card_table_score_the_predictors_alike(data):
    """Two views of one scoring loop: the same rows give the same Bayes-optimal and oracle numbers."""
    result = figure1(BayesAsModel(data.params), data, progress=False)
    table = accuracy_table(
        hmm_datasets.BayesOptimalPredictor(data.params, device="cpu"),
        data.input_ids,
        data.task_ids,
        data.layout,
        progress=False,
    )
    for index, row in enumerate(table["by_num_demos"]):
        for name in ("bayes", "oracle"):
            assert result.by_num_demos[name]["accuracy"][index] == pytest.approx(row[f"{name}_accuracy"])
            assert result.by_num_demos[name]["early_accuracy"][index] == pytest.approx(
                row[f"{name}_early_accuracy"]
            )
    np.testing.assert_allclose(
        result.by_test_position["oracle"], table["by_test_position"]["oracle_accuracy"]
    )


def test_a_model_with_a_smaller_vocabulary_is_refused(data):
    model = HMMRoFormerForCausalLM(HMMRoFormerConfig(**TINY_SIZES, vocab_size=5))
    with pytest.raises(ValueError, match="vocab_size=5 is smaller than the corpus's 7 tokens"):
        figure1(model, data, progress=False)


def test_unknown_data_is_refused():
    with pytest.raises(ValueError, match="neither a folder nor a reachable Hub dataset repo.*corpus preset"):
        load_evaluation_data("no-such-corpus")


def test_evaluate_script_on_a_saved_checkpoint_and_an_exported_corpus(run_script, tmp_path):
    torch.manual_seed(0)
    model = HMMRoFormerForCausalLM(HMMRoFormerConfig(**TINY_SIZES, vocab_size=7))
    model.save_pretrained(tmp_path / "model")
    config = hmm_datasets.get_preset("tiny")
    corpus = hmm_datasets.export_corpus(config, tmp_path / "corpus", table_rows=0, progress=False)
    result = run_script("scripts/figure1.py", "--model", tmp_path / "model", "--data", corpus, "--rows", "16")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "model early" in result.stdout
    written = json.loads((tmp_path / "model" / "figure1" / "figure1.json").read_text())
    assert written["num_rows"] == 16 and (tmp_path / "model" / "figure1" / "figure1.png").exists()

    # without --data the checkpoint's own corpus config is used; a bare model folder has none
    result = run_script(
        "scripts/figure1.py", "--model", tmp_path / "model", "--rows", "16", "--out", tmp_path / "own"
    )
    assert result.returncode == 2 and "carries no hmm_mixture_config.json" in result.stderr
    (tmp_path / "model" / "hmm_mixture_config.json").write_text(config.to_json())
    result = run_script(
        "scripts/figure1.py", "--model", tmp_path / "model", "--rows", "16", "--out", tmp_path / "own"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        json.loads((tmp_path / "own" / "figure1.json").read_text())["by_num_demos"] == written["by_num_demos"]
    )


def test_a_corpus_without_task_ids_is_one_error_line_naming_the_column(run_script, tmp_path):
    import pyarrow.parquet as pq

    torch.manual_seed(0)
    HMMRoFormerForCausalLM(HMMRoFormerConfig(**TINY_SIZES, vocab_size=7)).save_pretrained(tmp_path / "model")
    corpus = hmm_datasets.export_corpus(
        hmm_datasets.get_preset("tiny"), tmp_path / "corpus", table_rows=0, progress=False
    )
    for shard in (corpus / "data").glob("*.parquet"):  # as a Hub corpus with its labels dropped
        pq.write_table(pq.read_table(shard).drop_columns(["task_id", "hidden_states"]), shard)
    (corpus / "corpus_manifest.json").unlink()  # made by hand: no manifest (else: "damaged")
    result = run_script("scripts/figure1.py", "--model", tmp_path / "model", "--data", corpus, "--rows", "16")
    assert result.returncode == 2
    errors = [
        line for line in result.stderr.splitlines() if line.startswith("error:")
    ]  # beside progress bars
    [line] = errors
    assert line.startswith("error: the corpus's test split lacks the column(s) ['task_id']")
    assert not (tmp_path / "model" / "figure1").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--rows", "0"], "argument --rows: 0 must be at least 1"),
        (["--rows", "-5"], "argument --rows: -5 must be at least 1"),
        (["--batch-size", "0"], "argument --batch-size: 0 must be at least 1"),
        (["--model", "runs/modell"], "no such checkpoint folder: runs/modell"),  # never "a Hub id"
        (["--model", "truncated"], "cannot read the weights of 'truncated' (SafetensorError"),
        (["--data", "corpus"], "corpus is incomplete: the test split"),
    ],
)
def test_figure1_refuses_bad_input_in_one_line_and_writes_nothing(run_script, tmp_path, arguments, message):
    torch.manual_seed(0)
    HMMRoFormerForCausalLM(HMMRoFormerConfig(**TINY_SIZES, vocab_size=7)).save_pretrained(tmp_path / "model")
    (tmp_path / "runs").mkdir()
    if "truncated" in arguments:
        (tmp_path / "truncated").mkdir()
        for path in (tmp_path / "model").iterdir():
            (tmp_path / "truncated" / path.name).write_bytes(path.read_bytes()[:5000])
    if "corpus" in arguments:
        corpus = hmm_datasets.export_corpus(
            hmm_datasets.get_preset("tiny"), tmp_path / "corpus", table_rows=0
        )
        next((corpus / "data").glob("test-*.parquet")).unlink()
    before = sorted(tmp_path.rglob("*"))
    done = run_script("scripts/figure1.py", "--model", "model", "--data", "tiny", *arguments, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {message}") and "Traceback" not in done.stderr
    assert sorted(tmp_path.rglob("*")) == before
