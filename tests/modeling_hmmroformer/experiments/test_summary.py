"""A model folder summarized for its card: numbers from the result files, claims that can fail."""

import dataclasses
import json
import shutil

import pytest

from modeling_hmmroformer.experiments.analyses.claims import CLAIMS
from modeling_hmmroformer.experiments.analyses.evaluation import Figure1Result
from modeling_hmmroformer.experiments.analyses.summary import model_claims
from modeling_hmmroformer.experiments.running.folders import summarize_model_folder
from probing.results import ProbeResults


def test_claims_are_own_statistics_with_effects_over_the_floors_that_follow_the_measurements(
    reproduced_tiny,
):
    out, _ = reproduced_tiny
    figure1 = Figure1Result.from_dict(json.loads((out / "figure1" / "figure1.json").read_text()))
    probes = ProbeResults.read(out / "probes" / "probe_results.json")
    knockout = json.loads((out / "knockout" / "knockout.json").read_text())
    claims = model_claims(figure1, probes, knockout, depth=2)
    assert [c["figure"] for c in claims] == [claim.figure for claim in CLAIMS]
    accuracy, twin = (figure1.by_num_demos[name]["accuracy"] for name in ("model", "twin"))
    gain = claims[0]
    assert gain["own"]["mean"] == pytest.approx(accuracy[-1] - accuracy[0])
    if twin[-1] == twin[0]:  # the tiny twin answers alike with and without demonstrations
        assert gain["vacuous_floors"] == ["twin"] and gain["floors"] == {}
    else:
        assert gain["floors"]["twin"]["mean"] == pytest.approx(gain["own"]["mean"] - (twin[-1] - twin[0]))
    assert claims[1]["floors"]["twin"]["mean"] != 0.0  # along the test sequence the twin does move
    for c in claims:  # one seed decides nothing; a 2-layer model has no slope over layers 2..L
        assert c["label"] == "undecided (1 seed)" or c["verdict"] in ("n/a", "not testable")
    # the same model as its own twin: no effect over it
    itself = Figure1Result.from_dict(json.loads(json.dumps(figure1.to_dict())))
    itself.by_num_demos["twin"] = itself.by_num_demos["model"]
    itself.by_test_position["twin"] = itself.by_test_position["model"]
    for c in model_claims(itself, probes, knockout, depth=2)[:2]:
        assert c["floors"]["twin"]["mean"] == 0.0
    written_before_the_splits = dataclasses.replace(probes, splits=None)
    assert model_claims(figure1, written_before_the_splits, knockout, depth=2) == []


def test_a_reproduced_folder_is_summarized_from_its_files(reproduced_tiny):
    out, _ = reproduced_tiny
    summary = summarize_model_folder(out / "model")
    figure1 = json.loads((out / "figure1" / "figure1.json").read_text())
    counts = figure1["demo_counts"]
    assert summary["in_context"]["accuracy"]["model"] == figure1["by_num_demos"]["model"]["accuracy"][-1]
    assert [row["demos"] for row in summary["in_context"]["by_num_demos"]] == counts
    assert len(summary["claims"]) == len(CLAIMS) and summary["probes"]["layers"][0]["layer"] == 0
    lemma1 = json.loads((out / "memory" / "lemma1.json").read_text())
    assert summary["memory"]["lemma1"] == lemma1
    assert (
        summary["memory"]["mixture_rate"] == lemma1["mixture"]["fit"]["rate"]
    )  # a number: the card formats it
    assert summary["corpus"]["name"] == "tiny" and summary["run_config"]["model"]["hidden_size"] == 32


def test_a_folder_without_results_is_summarized_as_such(reproduced_tiny, tmp_path):
    out, _ = reproduced_tiny
    folder = tmp_path / "model"
    shutil.copytree(
        out / "model",
        folder,
        ignore=shutil.ignore_patterns("figure1", "probes", "memory", "knockout", "README.md"),
    )
    summary = summarize_model_folder(folder)
    assert summary["in_context"] is None and summary["probes"] is None and summary["claims"] == []
    assert summary["memory"] is None
    assert summary["model"]["num_parameters"] == 25_696
