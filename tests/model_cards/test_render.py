"""The model card, the report and their shared results section, rendered from a plain summary
(a fixture: the summary of a tiny reproduction's model folder), with no checkpoint involved."""

import copy
import json
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from model_cards import CITATION, MODEL_CARD_MARKER
from model_cards.render import (
    belief_cell_text,
    cell_text,
    headroom_cell_text,
    ladder_text,
    model_index_results,
    probe_cell_text,
    render_kept_network_card,
    render_model_card,
    render_report,
    render_results_section,
    training_line,
    write_model_card,
)

SUMMARY = json.loads((Path(__file__).parent / "fixtures" / "summary_tiny.json").read_text())


@pytest.fixture
def summary():
    return copy.deepcopy(SUMMARY)


def test_the_results_section_shows_the_numbers_and_each_claims_effect_over_the_twin(summary):
    claim = summary["claims"][4]  # the task posterior's rise: own, over the twin and over the tokens
    claim["own"]["mean"], claim["floors"]["twin"]["mean"], claim["floors"]["tokens"]["mean"] = (
        0.25,
        0.125,
        -0.5,
    )
    claim["split_spread"]["mean"] = 0.0625
    section = render_results_section(summary)
    assert (
        f"| 3(a) | {claim['claim']} | {claim['statistic']} (+) | +0.250 | +0.125 | -0.500 | 0.062 | undecided (1 seed) |"
        in section
    )
    assert "| n/a (fewer than 3 layers) |" in section  # a 2-layer model: no slope over layers 2..L
    # Figures 1, 3(a), 3(b), 2, 7, Lemma 1, the model's memory and the rotary knock-out
    assert section.count("![") == 4 + len(summary["figure7"]) + 2 + 1
    for row in summary["in_context"]["headline"]:
        assert f"| {row['label']} | {cell_text(row['model'])} | {cell_text(row['bayes'])} |" in section
    assert summary["beliefs"]  # the belief-state probes, model / twin per layer
    for row in summary["beliefs"]:
        cells = " | ".join(belief_cell_text(cell) for cell in row["cells"])
        assert f"| {row['belief']} | {row['segment']} | {cells} |" in section
    for layer in summary["probes"]["layers"]:
        assert (
            f"| {layer['layer']} | " + " | ".join(probe_cell_text(cell) for cell in layer["cells"]) in section
        )


def test_the_summary_holds_numbers_and_the_cells_write_them():
    """The summary is data (numbers, None where there is none); only the renderer formats."""
    headline = SUMMARY["in_context"]["headline"]
    assert all(
        isinstance(row[name], (int, float, type(None))) for row in headline for name in ("model", "bayes")
    )
    assert [cell_text(value) for value in (0.62345, 1, 0, None)] == ["0.623", "1", "0", ""]
    assert probe_cell_text({"accuracy": 0.5, "headroom_fraction": 0.25}) == "0.500 [0.25]"
    assert probe_cell_text({"accuracy": 0.5, "headroom_fraction": None}) == "0.500"
    reach = {"target": "task", "fraction": 0.9, "layer": 2.0, "ci_low": 1.0, "ci_high": None}
    assert headroom_cell_text(reach) == "task 90%: layer 2 [1, never]"
    assert headroom_cell_text({**reach, "layer": None}) == "task 90%: never [1, never]"
    assert belief_cell_text({"model": 0.91, "twin": 0.2}) == "0.910 / 0.200"
    assert belief_cell_text({"model": 0.91, "twin": None}) == "0.910"


def test_a_card_carries_the_measured_results_as_model_index(summary):
    card = render_model_card(
        summary, location="runs/x/model", repo_id="org/model", dataset_repo_id="org/data"
    )
    parsed = ModelCard(str(card))  # the YAML header parses back
    assert parsed.data.library_name == "transformers" and "arxiv:2506.01919" in parsed.data.tags
    assert parsed.data.datasets == ["org/data"]
    values = {result.metric_name: result.metric_value for result in parsed.data.eval_results}
    in_context = summary["in_context"]
    assert values["Top-1 accuracy, no demonstrations"] == round(in_context["accuracy_no_demos"]["model"], 4)
    assert values["KL(Bayes-optimal || model), nats/token"] == round(
        in_context["model_vs_bayes"]["kl_bayes_model"], 4
    )
    assert MODEL_CARD_MARKER in card.text and "org/model" in card.text and "runs/x/model" not in card.text
    assert CITATION in card.text


def test_a_summary_without_results_gets_a_card_that_says_so(summary, tmp_path):
    summary.update(in_context=None, probes=None, claims=[], figure7=[])
    assert render_results_section(summary) == "" and model_index_results(summary, "d", "n") == []
    path = write_model_card(tmp_path, summary)
    card = ModelCard.load(path)
    assert "Not measured yet" in card.text and card.data.eval_results is None
    assert str(tmp_path) in card.text  # the snippets load the folder itself


PLACEMENT = {
    "corpus": "tiny",
    "learner": "retrieves",
    "splits": [
        {"split": "test", "title": "seen tasks", "reference": "mixture Bayes", "kl": 0.12345, "best_rung": "bigram",
         "best_rung_kl": 0.2, "past_ladder": True, "label": "retrieval", "accuracy": 0.61},
        {"split": "test_unseen", "title": "unseen tasks", "reference": "oracle", "kl": 0.4, "best_rung": "PPM-C",
         "best_rung_kl": 0.35, "past_ladder": False, "label": "bigram", "accuracy": 0.42},
    ],
}  # fmt: skip


def kept_card(summary, placement) -> ModelCard:
    kept = {
        "step": 52,
        "revision": "step-52",
        "tokens": 1000,
        "placement": placement,
        "unplaced": "no record",
    }
    card = render_kept_network_card(summary, kept=kept, repo_id="org/model", dataset_repo_id="org/data")
    return ModelCard(str(card))  # the YAML header parses back


def test_a_kept_networks_card_carries_its_place_per_split_and_loads_its_revision(summary):
    card = kept_card(summary, PLACEMENT)
    results = {(r.dataset_split, r.metric_name): r.metric_value for r in card.data.eval_results}
    for split in PLACEMENT["splits"]:
        reference = split["reference"]
        assert results[(split["split"], f"KL({reference} || network), nats/token")] == round(split["kl"], 4)
        rung = f"KL({reference} || best in-context rung, {split['best_rung']}), nats/token"
        assert results[(split["split"], rung)] == split["best_rung_kl"]
        assert results[(split["split"], "Top-1 accuracy")] == split["accuracy"]
        assert (
            results[(split["split"], "Nearest learner (a rung of the ladder, retrieval or inference)")]
            == (split["label"])
        )
    assert results[(None, "Learner on the ladder (infers, retrieves or below the ladder)")] == "retrieves"
    assert len(results) == 4 * len(PLACEMENT["splits"]) + 1
    assert 'from_pretrained("org/model", revision="step-52", trust_remote_code=True)' in card.text
    assert (
        "| unseen tasks (`test_unseen`) | oracle | 0.4000 | PPM-C | 0.3500 | no | bigram | 0.4200 |"
        in card.text
    )
    assert (
        "hmm-development --checkpoints org/model@step-52" in card.text
        and "scripts/figure1.py" not in card.text
    )


def test_a_kept_network_no_record_placed_has_no_model_index_and_says_why(summary):
    card = kept_card(summary, None)
    assert card.data.eval_results is None and "model-index" not in str(card)
    assert "Not placed on the in-context ladder: no record, so this card gives no number of it." in card.text
    assert "1,000 training token positions" in card.text


def test_the_training_line_says_what_ran(summary):
    line = training_line(summary)
    steps = summary["run_config"]["training"]["max_steps"]
    assert line.startswith(f"{steps} steps of ") and f"{summary['training']['train_tokens']:,} token" in line
    summary["training"] = None
    assert training_line(summary) is None


def test_the_report_has_the_results_the_stage_times_and_the_files(summary):
    report = render_report(
        summary,
        preset="tiny",
        stage_seconds={"corpus": 1.5, "train": 10.0},
        machine={"device": "2 CPU cores", "date": "2026-11-22", "torch": "2.13", "transformers": "5.23"},
        files={"REPORT.md": "this report"},
        files_root="runs/tiny/",
    )
    assert render_results_section(summary) in report
    assert "| corpus | 1.5 s |" in report and "**11.5 s**" in report
    assert "| `REPORT.md` | this report |" in report


def test_the_rerun_commands_write_where_the_card_picks_the_results_up(summary):
    folder_card = render_model_card(summary, location="runs/x/model").text
    assert "python scripts/probe.py --model runs/x/model   #" in folder_card  # default out: <model>/probes
    assert "python scripts/figure1.py --model runs/x/model   #" in folder_card
    assert "--out" not in folder_card and "into `runs/x/model`, where this card picks them up" in folder_card
    hub_card = render_model_card(
        summary, location="runs/x/model", repo_id="org/m", dataset_repo_id="org/d"
    ).text
    assert "python scripts/probe.py --model org/m --data org/d --out probes   #" in hub_card
    assert "python scripts/figure1.py --model org/m --data org/d --out figure1   #" in hub_card


def test_the_ladder_text_shows_a_kl_rounded_below_zero_as_zero():
    ladder = {
        "rungs": [
            {"name": "ppm", "label": "PPM-C", "accuracy": 0.35, "kl_bayes": 0.435},
            {"name": "oracle", "label": "oracle", "accuracy": 0.433, "kl_bayes": -3e-9},
        ],
        "best_in_context": "ppm",
        "gap_closed": {"model": 0.1},
        "below_in_context": {"model": False},
    }
    lines = ladder_text(ladder, "the ladder").splitlines()
    assert lines[1:3] == ["  0.350  PPM-C  KL 0.435", "  0.433  oracle  KL 0.000"]
    assert "(PPM-C) to Bayes closed: +0.10 (above it)" in lines[3]


@pytest.mark.parametrize(
    ("seeds", "text"), [((6, 6), "six"), ((2,), "two"), ((2, 6, 2), "two to six"), ((12,), "12")]
)
def test_the_report_across_k_says_how_many_seeds_each_cell_trains(seeds, text):
    from model_cards.study_reports import seeds_per_cell_text

    assert seeds_per_cell_text([{"seeds": list(range(n))} for n in seeds]) == text
