"""A model folder summarized for its card: numbers from the result files, claims that can fail."""

import json
import shutil

from modeling_hmmroformer.experiments.summary import paper_claims, summarize_model_folder


def test_claims_follow_the_measurements(reproduced_tiny):
    out, _ = reproduced_tiny
    figure1 = json.loads((out / "figure1" / "figure1.json").read_text())
    falling = json.loads(json.dumps(figure1))
    falling["by_num_demos"]["model"]["accuracy"] = sorted(
        figure1["by_num_demos"]["model"]["accuracy"], reverse=True
    )
    falling["by_num_demos"]["model"]["accuracy"][0] += 0.01  # strictly more with no demonstrations
    rises = paper_claims(figure1, None)[0]
    falls = paper_claims(falling, None)[0]
    accuracy = figure1["by_num_demos"]["model"]["accuracy"]
    assert rises["holds"] == (accuracy[-1] > accuracy[0])
    assert (
        falls["holds"] is False
        and f"{falling['by_num_demos']['model']['accuracy'][0]:.3f}" in falls["measured"]
    )


def test_a_reproduced_folder_is_summarized_from_its_files(reproduced_tiny):
    out, _ = reproduced_tiny
    summary = summarize_model_folder(out / "model")
    figure1 = json.loads((out / "figure1" / "figure1.json").read_text())
    counts = figure1["demo_counts"]
    assert summary["in_context"]["accuracy"]["model"] == figure1["by_num_demos"]["model"]["accuracy"][-1]
    assert [row["demos"] for row in summary["in_context"]["by_num_demos"]] == counts
    assert len(summary["claims"]) == 10 and summary["probes"]["layers"][0]["layer"] == 0
    lemma1 = json.loads((out / "memory" / "lemma1.json").read_text())
    assert summary["memory"]["lemma1"] == lemma1
    assert summary["memory"]["mixture_rate"] == f"{lemma1['mixture']['fit']['rate']:.3f}"
    figure2 = json.loads((out / "probes" / "probe_results.json").read_text())["patterns"]["figure2"]
    part_claims = [c for c in summary["claims"] if c["figure"] == "2"]
    assert [c["holds"] for c in part_claims] == [
        figure2["by_part"][part]["upper_layers_change_less"]
        for part in ("total", "position_only", "weighted_attention_tv")
    ]
    assert summary["corpus"]["name"] == "tiny" and summary["run_config"]["model"]["hidden_size"] == 32


def test_a_folder_without_results_is_summarized_as_such(reproduced_tiny, tmp_path):
    out, _ = reproduced_tiny
    folder = tmp_path / "model"
    shutil.copytree(
        out / "model", folder, ignore=shutil.ignore_patterns("figure1", "probes", "memory", "README.md")
    )
    summary = summarize_model_folder(folder)
    assert summary["in_context"] is None and summary["probes"] is None and summary["claims"] == []
    assert summary["memory"] is None
    assert summary["model"]["num_parameters"] == 25_696
