"""Every committed study decided again from its committed records by today's rule: the verdicts,
p-values and intervals must be those its results.json publishes. A change to the rule's code
that would change a published verdict fails here until the results are regenerated on purpose
(`scripts/diversity_report.py --redecide results/diversity --readme README.md`,
`scripts/diversity_report.py --redecide results/inference`,
`scripts/architectures_report.py --redecide results/architectures`)."""

import json
from pathlib import Path

import pytest

from modeling_hmmroformer.experiments.decisions.architectures import redecide_architectures
from modeling_hmmroformer.experiments.decisions.diversity import redecide_diversity
from modeling_hmmroformer.experiments.reports import committed_report

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
    summary, records, ladders = committed_report(RESULTS / "architectures")
    check(committed, redecide_architectures(summary, records, next(iter(ladders.values()))), "cells")
