"""The model card and the report's results section: numbers from the result files, claims that can fail."""

import json
import shutil

from huggingface_hub import ModelCard

from model_cards.render import paper_claims, render_model_card, render_results_section, summarize_model_folder


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


def test_the_results_section_marks_a_claim_that_fails(reproduced_tiny):
    out, _ = reproduced_tiny
    summary = summarize_model_folder(out / "model")
    summary["claims"][0] = {**summary["claims"][0], "holds": False}
    section = render_results_section(summary)
    assert f"| 1 | {summary['claims'][0]['claim']} | **no** |" in section
    assert section.count("![") == 5  # Figures 1, 3(a), 3(b), 2, 7


def test_a_folder_without_results_gets_a_card_that_says_so(reproduced_tiny, tmp_path):
    out, _ = reproduced_tiny
    folder = tmp_path / "model"
    shutil.copytree(out / "model", folder, ignore=shutil.ignore_patterns("figure1", "probes", "README.md"))
    card = render_model_card(folder)
    assert "Not measured yet" in card.text and card.data.eval_results is None
    assert ModelCard(str(card)).data.library_name == "transformers"  # the YAML parses back
    summary = summarize_model_folder(folder)
    assert summary["in_context"] is None and summary["claims"] == []
    assert summary["model"]["num_parameters"] == 25_696
