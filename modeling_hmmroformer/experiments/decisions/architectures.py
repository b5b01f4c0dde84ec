"""HMMRoFormer against other architectures: studies of the same corpus, training and depth whose
models differ only in their architecture (`--study architecture-llama` beside `diversity-32`),
side by side on the ladder, the yardsticks and the claims, gathered from the studies' own
summaries (`aggregate.summarize_study`: each study folder's results.json).

Plain data in, plain data out: `scripts/architectures_report.py` reads the folders and writes.
"""

from __future__ import annotations

from ..analyses.claims import claim_words, decide_report
from ..analyses.record import ModelRecord
from .aggregate import StudySummary, counted_statistics, ladder_places
from .diversity import SPLITS, learner_of, setup_of, study_cells

ARCHITECTURES_TITLE = "# HMMRoFormer against other architectures"  # the report's first line starts so
SHARED_SETUP = ("corpus", "training")  # what the compared studies must share
SPLIT_WORDS = {"test": "seen tasks", "test_unseen": "unseen tasks"}
# the statistics compared side by side: (name, words, where in a cell, which way is better)
LADDER = (
    ("model_accuracy", "top-1, test split", ("model_accuracy",), "higher"),
    ("kl_bayes_model", "KL(Bayes ‖ model), test split", ("kl_bayes_model",), "lower"),
    ("gap_closed", "gap closed from the best in-context predictor to Bayes", ("gap_closed",), "higher"),
    *(
        (f"{name}_{split}", f"{words}, {SPLIT_WORDS[split]}", ("yardsticks", split, *where), better)
        for split in SPLITS
        for name, words, where, better in (
            ("top1", "top-1", ("model_accuracy",), "higher"),
            ("kl_mixture", "KL(mixture Bayes ‖ model)", ("kl", "mixture"), "lower"),
            ("kl_prior", "KL(prior-level Bayes ‖ model)", ("kl", "prior"), "lower"),
        )
    ),
)


def architecture_of(summary: StudySummary) -> str:
    """The model type a study trained (summaries written before it was kept: HMMRoFormer's)."""
    return setup_of(summary, "model")["model_type"]


def summarize_architectures(summaries: list[StudySummary], sources: list[str]) -> dict:
    """The side-by-side summary of studies that differ only in their architecture, at the depths
    they share (`sources`: where each summary came from, named in errors). Studies of another
    corpus or training, one architecture given twice, or no depth in common, are refused."""
    if len(summaries) < 2:
        raise ValueError("give two or more study folders: the architectures to compare")
    seen: dict[str, str] = {}
    for summary, source in zip(summaries, sources):
        for section in SHARED_SETUP:
            if getattr(summary, section) != getattr(summaries[0], section):
                raise ValueError(
                    f"the {section} of {source} differs from {sources[0]}'s: architectures are compared "
                    "on one corpus with one training"
                )
        architecture = architecture_of(summary)
        if architecture in seen:
            raise ValueError(f"{architecture} is in both {seen[architecture]} and {source}: give one of them")
        seen[architecture] = source
    depths = sorted(set.intersection(*({d["depth"] for d in s.depths} for s in summaries)))
    if not depths:
        raise ValueError(f"the studies {', '.join(sources)} share no depth: compare studies of one depth")
    cells = [
        {"architecture": architecture_of(summary), "model": setup_of(summary, "model"), **cell}
        for summary in summaries
        for cell in study_cells(summary)
        if cell["depth"] in depths
    ]
    records: dict[tuple[str, int], list[ModelRecord]] = {}
    for summary in summaries:  # by architecture: two studies may share a name (`--model.model_type`)
        for record in summary.models:
            records.setdefault((architecture_of(summary), record.depth), []).append(record)
    ladder = (summaries[0].yardsticks or {}).get("ladder")  # one corpus: one ladder
    return {
        "sources": list(sources),
        "setup": {
            "corpus": summaries[0].corpus,
            "training": summaries[0].training,
            "yardstick_rows": summaries[0].study["yardstick_rows"],
            "eval_rows": summaries[0].study["eval_rows"],
        },
        "architectures": [architecture_of(s) for s in summaries],
        "depths": depths,
        **decided_architectures(cells, records, ladder),
    }


def decided_architectures(
    cells: list[dict], records: dict[tuple[str, int], list[ModelRecord]], ladder: dict | None
) -> dict:
    """The parts of the comparison the rule decides, from the cells and their models' records
    (`records`: (architecture, depth) -> records; `ladder`: the corpus's ladder facts on the
    yardstick rows): each cell's place on the ladder and its claims, decided by the rule with
    Holm across every claim of the comparison, and what differs."""
    decided = decide_report(
        [
            [
                counted_statistics(r, ladder, c["corpus_seed"])
                for r in records[(c["architecture"], c["depth"])]
            ]
            for c in cells
        ]
    )
    placed = []
    for cell, rows in zip(cells, decided):
        places = ladder_places(records[(cell["architecture"], cell["depth"])], ladder)
        placed.append(
            {**cell, "ladder_places": places, "learner": learner_of(places["learners"]), "verdicts": rows}
        )
    return {
        "cells": placed,
        "ladder": [
            {
                "key": key,
                "words": words,
                "better": better,
                "by_cell": [statistic_at(c, where) for c in placed],
            }
            for key, words, where, better in LADDER
        ],
        "claims": claim_words(),
        "differences": [
            differences(depth, [c for c in placed if c["depth"] == depth])
            for depth in sorted({c["depth"] for c in placed})
        ],
    }


def redecide_architectures(
    summary: dict, records: dict[tuple[str, int], list[ModelRecord]], ladder: dict | None
) -> dict:
    """A committed comparison decided again by today's rule from its models' committed records
    (`records`: (study, depth) -> records): every part the rule decides replaced, the rest kept."""
    kept = [
        {k: v for k, v in c.items() if k not in ("verdicts", "ladder_places", "learner")}
        for c in summary["cells"]
    ]
    by_architecture = {(c["architecture"], c["depth"]): records[(c["study"], c["depth"])] for c in kept}
    return {**summary, **decided_architectures(kept, by_architecture, ladder)}


def statistic_at(cell: dict, where: tuple[str, ...]) -> dict | None:
    """A cell's statistic (an across-seeds mean and interval) at its `where` path, None if absent."""
    value = cell
    for key in where:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def apart(a: dict | None, b: dict | None) -> bool:
    """Whether two across-seed intervals do not overlap (False where either has none)."""
    if not a or not b or None in (a.get("ci_low"), b.get("ci_low")):
        return False
    return a["ci_high"] < b["ci_low"] or b["ci_high"] < a["ci_low"]


def differences(depth: int, cells: list[dict]) -> dict:
    """What differs between the architectures at one depth: the claims whose verdicts differ, and
    the ladder's statistics whose across-seed intervals do not overlap between the first
    architecture and each other (with both means)."""
    base, others = cells[0], cells[1:]
    verdicts = {
        v["key"]: [c["verdicts"][index]["label"] for c in cells] for index, v in enumerate(base["verdicts"])
    }
    apart_rows = []
    for key, words, where, better in LADDER:
        mine = statistic_at(base, where)
        for other in others:
            theirs = statistic_at(other, where)
            if apart(mine, theirs):
                means = {base["architecture"]: mine["mean"], other["architecture"]: theirs["mean"]}
                apart_rows.append({"key": key, "words": words, "better": better, "means": means})
    return {
        "depth": depth,
        "verdicts": {key: labels for key, labels in verdicts.items() if len(set(labels)) > 1},
        "num_claims": len(verdicts),
        "apart": apart_rows,
    }
