"""Every committed study decided again from its committed records by today's rule: the verdicts,
p-values and intervals must be those its results.json publishes. A change to the rule's code
that would change a published verdict fails here until the results are regenerated on purpose
(`scripts/diversity_report.py --redecide results/diversity --readme docs/history.md`,
`scripts/diversity_report.py --redecide results/inference --readme README.md`,
`scripts/architectures_report.py --redecide results/architectures`)."""

import json
import shutil
from pathlib import Path

import pytest

from modeling_hmmroformer.experiments.analyses.development import development_from_dict
from modeling_hmmroformer.experiments.analyses.ladder_gate import learner, model_places
from modeling_hmmroformer.experiments.analyses.record import ModelRecord
from modeling_hmmroformer.experiments.decisions.architectures import redecide_architectures
from modeling_hmmroformer.experiments.decisions.diversity import redecide_diversity
from modeling_hmmroformer.experiments.reports import committed_report
from modeling_hmmroformer.experiments.settings import PIPELINES, record_fingerprint

RESULTS = Path(__file__).resolve().parents[3] / "results"
NUMBERS = ("p_own", "claim_p", "p_holm")


def decided_rows(summary: dict, groups: str) -> list[tuple[str, dict]]:
    """(cell name, verdict row) of every claim of every decided cell of a summary."""
    cells = summary[groups]
    return [
        (f"{c.get('study', c.get('num_tasks'))} {c['depth']} {c.get('draws', '')}", row)
        for c in cells
        for row in c["verdicts"]
    ]


def same_numbers(committed, measured) -> bool:
    if committed is None or measured is None:
        return committed is measured
    return measured == pytest.approx(committed, rel=1e-9, abs=1e-12)


def check(committed: dict, redecided: dict, groups: str) -> None:
    pairs = list(zip(decided_rows(committed, groups), decided_rows(redecided, groups), strict=True))
    assert pairs, "no decided claims in the committed results"
    for (name, old), (_, new) in pairs:
        where = f"{name} {old['key']}"
        assert new["label"] == old["label"], where
        for key in NUMBERS:
            assert same_numbers(old[key], new[key]), f"{where} {key}: {old[key]} committed, {new[key]} now"
        for key in ("mean", "ci_low", "ci_high"):
            assert same_numbers(old["own"][key], new["own"][key]), f"{where} own {key}"
        assert set(new["floors"]) == set(old["floors"]), where
        for floor, effect in old["floors"].items():
            for key in ("mean", "ci_low", "ci_high", "p"):
                assert same_numbers(effect[key], new["floors"][floor][key]), f"{where} over {floor} {key}"


@pytest.mark.parametrize("family", ["diversity", "inference"])
def test_the_studies_across_k_are_their_records_decided_again(family):
    committed = json.loads((RESULTS / family / "results.json").read_text())
    check(committed, redecide_diversity(*committed_report(RESULTS / family)), "decided")


def test_the_architecture_comparison_is_its_records_decided_again():
    committed = json.loads((RESULTS / "architectures" / "results.json").read_text())
    summary, records, facts = committed_report(RESULTS / "architectures")
    check(committed, redecide_architectures(summary, records, next(iter(facts.values()))["ladder"]), "cells")


CELL_NUMBERS = ("kl_bayes_model", "gap_closed", "model_accuracy", "bayes_accuracy", "yardsticks", "seconds")


def numbers_of(value, path=""):
    """(path, number) of every number in a nested JSON value."""
    if isinstance(value, dict):
        return [pair for key, inner in value.items() for pair in numbers_of(inner, f"{path}.{key}")]
    if isinstance(value, list):
        return [pair for i, inner in enumerate(value) for pair in numbers_of(inner, f"{path}[{i}]")]
    return [(path, value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


@pytest.mark.parametrize("family", ["diversity", "inference"])
def test_the_committed_cells_are_their_records_summarized_again(family):
    """What the report read of each study folder's own report is what the committed records give:
    the report can be rebuilt from the committed records alone (the intervals' bounds within 1e-4
    of those the older reports were written with, whose t quantiles were computed otherwise)."""
    committed = json.loads((RESULTS / family / "results.json").read_text())
    rebuilt = {
        (c["study"], c["depth"]): c for c in redecide_diversity(*committed_report(RESULTS / family))["cells"]
    }
    assert [(c["study"], c["depth"]) for c in committed["cells"]] == list(rebuilt)
    for cell in committed["cells"]:
        mine = rebuilt[(cell["study"], cell["depth"])]
        for key in ("num_tasks", "corpus_seed", "seeds", "best_in_context", "prior_label", "learner"):
            assert mine[key] == cell[key], (cell["study"], cell["depth"], key)
        for key in CELL_NUMBERS:
            old, new = numbers_of(cell[key]), numbers_of(mine[key])
            assert [p for p, _ in new] == [p for p, _ in old], (cell["study"], key)
            for (path, a), (_, b) in zip(old, new):
                rel = 1e-4 if path.endswith(("ci_low", "ci_high")) else 1e-9
                assert b == pytest.approx(a, rel=rel, abs=1e-12), (
                    f"{cell['study']} {cell['depth']} {key}{path}"
                )


@pytest.fixture
def inference_copy(tmp_path):
    """The committed inference report with its records, in a folder of its own."""
    folder = tmp_path / "inference"
    shutil.copytree(RESULTS / "inference", folder, ignore=shutil.ignore_patterns("figures", "*.md"))
    return folder


def test_a_model_recorded_after_the_report_joins_it(inference_copy):
    """The report as written before the 16-layer cell of draw 1 landed, and before its second
    model did: deciding it again from the records gives the cell, with every model recorded."""
    committed = json.loads((inference_copy / "results.json").read_text())
    landed = ("inference-8192-draw1", 16)
    earlier = {**committed, "cells": [c for c in committed["cells"] if (c["study"], c["depth"]) != landed]}
    (inference_copy / "results.json").write_text(json.dumps(earlier))
    (record,) = (inference_copy / landed[0] / "models").glob("depth16-seed3.json")
    held_back = record.read_text()
    record.unlink()
    one = redecide_diversity(*committed_report(inference_copy))
    assert {(c["study"], c["depth"]): c["seeds"] for c in one["cells"]}[landed] == [2]
    record.write_text(held_back)
    both = redecide_diversity(*committed_report(inference_copy))
    check(committed, both, "decided")
    assert [(c["study"], c["depth"], c["seeds"]) for c in both["cells"]] == [
        (c["study"], c["depth"], c["seeds"]) for c in committed["cells"]
    ]
    assert both["missing"] == committed["missing"]


def test_a_study_recorded_after_the_report_takes_its_planned_place_at_once(inference_copy):
    """The report as written before a whole study (a new HMM draw) landed: the first decision with
    it gives every part in the order a second decision gives, its ladder among the others."""
    committed = json.loads((inference_copy / "results.json").read_text())
    landed = next(s for s in reversed(committed["ladders"]) if s.startswith("inference-512-"))
    earlier = {
        **committed,
        "cells": [c for c in committed["cells"] if c["study"] != landed],
        "ladders": {study: ladder for study, ladder in committed["ladders"].items() if study != landed},
        "decided_from": {
            kind: {study: path for study, path in paths.items() if study != landed}
            for kind, paths in committed["decided_from"].items()
        },
    }
    (inference_copy / "results.json").write_text(json.dumps(earlier))
    first = redecide_diversity(*committed_report(inference_copy))
    assert list(first["ladders"]) == list(committed["ladders"])
    for kind, paths in committed["decided_from"].items():
        assert list(first["decided_from"][kind]) == list(paths)
    assert [(c["study"], c["depth"]) for c in first["cells"]] == [
        (c["study"], c["depth"]) for c in committed["cells"]
    ]


def test_every_patched_model_and_its_twin_are_in_the_patching_table_as_recorded(inference_copy):
    summary, records, facts = committed_report(inference_copy)
    patched = {
        (study, r.depth, r.seed): r
        for (study, _), mine in records.items()
        for r in mine
        if r.patching is not None
    }
    rows = redecide_diversity(summary, records, facts)["patching"]
    assert patched and len(rows) == len(patched)  # one row per patched model, none for the others
    for row in rows:
        record = patched[(row["study"], row["depth"], row["seed"])]
        for network, part in (("trained", "model"), ("twin", "control")):
            reading, result = row["networks"][network], record.patching[part]
            assert reading["state_carried_lower"] == result["state_carried_lower"]
            assert reading["task_shares"] == result["donors"]["task"]["shares"]
            assert reading["state_effect_nats"] == result["donors"]["state"]["effect_nats"]


def test_a_record_of_other_settings_than_its_study_is_refused(inference_copy):
    folder = inference_copy / "inference-8192-draw2" / "models"
    record = json.loads((folder / "depth4-seed4.json").read_text())
    (folder / "depth16-seed4.json").write_text(json.dumps({**record, "depth": 16, "fingerprint": "0" * 16}))
    with pytest.raises(
        ValueError, match="depth 16 seed 4 was made with other settings than inference-8192-draw2"
    ):
        committed_report(inference_copy)


def test_a_study_placed_on_yardsticks_whose_facts_are_gone_is_refused(inference_copy):
    (inference_copy / "inference-32-draw1" / "yardsticks.json").unlink()
    with pytest.raises(
        ValueError, match="inference-32-draw1's models were placed on its corpus's yardsticks"
    ):
        redecide_diversity(*committed_report(inference_copy))


def test_a_study_of_another_width_is_refused_in_the_report(inference_copy, monkeypatch):
    """Cells of one report share their model: the records of a study at width 256, recorded
    beside the 64-wide ones, are refused rather than pooled with K = 8192's."""
    wide = "inference-8192-wide"
    settings = PIPELINES["inference-8192-draw2"]
    monkeypatch.setitem(
        PIPELINES,
        wide,
        settings.replace(name=wide, overrides={**settings.overrides, "model": {"hidden_size": 256}}),
    )
    source, target = inference_copy / "inference-8192-draw2", inference_copy / wide
    shutil.copytree(source, target)
    for record in (target / "models").glob("*.json"):
        record.write_text(
            json.dumps({**json.loads(record.read_text()), "fingerprint": record_fingerprint(wide)})
        )
    with pytest.raises(ValueError, match=f"the model of {wide} differs from inference-32-draw0's"):
        redecide_diversity(*committed_report(inference_copy))


def test_each_final_network_over_training_is_gated_as_its_model_is_in_the_report():
    """The phase diagram's gate of every committed model's last kept network (read on the
    yardstick rows) is the learner the report gives that model (its own ladder on seen tasks,
    the corpus's on unseen ones): the figure and the report say the same."""
    checked = 0
    for path in sorted((RESULTS / "inference").glob("*/models/*.json")):
        record = ModelRecord.from_dict(json.loads(path.read_text()))
        facts = json.loads((path.parents[1] / "yardsticks.json").read_text())
        final = development_from_dict(record.development).networks[-1]
        assert final.step == record.development["networks"][-1]["step"]
        assert final.learner == learner(model_places(record, facts["ladder"])), path
        checked += 1
    assert checked >= 18
