"""A model folder summarized for its card: numbers from the result files, claims that can fail."""

import json
import shutil

import pytest

from modeling_hmmroformer.experiments.claims import CLAIMS
from modeling_hmmroformer.experiments.summary import model_claims, summarize_model_folder


def test_claims_are_effects_over_the_twin_and_follow_the_measurements(reproduced_tiny):
    out, _ = reproduced_tiny
    figure1 = json.loads((out / "figure1" / "figure1.json").read_text())
    probes = json.loads((out / "probes" / "probe_results.json").read_text())
    knockout = json.loads((out / "knockout" / "knockout.json").read_text())
    claims = model_claims(figure1, probes, knockout, depth=2)
    assert [c["figure"] for c in claims] == [claim.figure for claim in CLAIMS]
    accuracy, twin = (figure1["by_num_demos"][name]["accuracy"] for name in ("model", "twin"))
    gain = claims[0]
    assert gain["trained"] == pytest.approx(accuracy[-1] - accuracy[0])
    assert gain["effect"] == pytest.approx(gain["trained"] - (twin[-1] - twin[0]))
    assert all(
        c["label"] == ("undecided (1 seed)" if c["effect"] is not None else "undecided (0 seeds)")
        for c in claims
    )
    # the same model as its own twin: every effect 0
    itself = json.loads(json.dumps(figure1))
    itself["by_num_demos"]["twin"] = itself["by_num_demos"]["model"]
    itself["by_test_position"]["twin"] = itself["by_test_position"]["model"]
    assert model_claims(itself, probes, knockout, depth=2)[:2] == [
        {**c, "twin": c["trained"], "effect": 0.0}
        for c in model_claims(itself, probes, knockout, depth=2)[:2]
    ]
    assert model_claims(figure1, probes, knockout, depth=2)[0]["effect"] != 0.0
    without_twin = json.loads(json.dumps(figure1))
    del without_twin["by_num_demos"]["twin"]
    assert model_claims(without_twin, probes, knockout, depth=2) == []  # results written before the twin


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
    assert summary["memory"]["mixture_rate"] == f"{lemma1['mixture']['fit']['rate']:.3f}"
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
