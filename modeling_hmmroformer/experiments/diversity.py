"""The task-diversity study across K: every cell (a corpus of K HMMs and a depth) placed on its
yardsticks, with its claims decided, gathered from the studies' own summaries
(`aggregate.summarize_study`: each study folder's results.json) into one summary; and what
the corpus draw moves (`diversity-512` against `diversity-512-draw1`: the same prior and K,
another parameter seed).

Plain data in, plain data out: `scripts/diversity_report.py` reads the folders and writes.
"""

from __future__ import annotations

from .settings import HMM_ROFORMER, PRESETS

DIVERSITY_TITLE = "# Retrieval or inference?"  # the report's first line starts so
SPLITS = ("test", "test_unseen")  # seen tasks, unseen tasks
# the statistics of a cell whose change between corpus draws the report shows, beside the claims'
DRAWN_STATISTICS = {
    "kl_bayes_model": "KL(Bayes ‖ model) on the test split",
    "model_accuracy": "model top-1 on the test split",
}


def planned_cells() -> list[tuple[str, int]]:
    """(study, depth) of every cell the named diversity studies plan, in the report's order."""
    studies = [s for name, s in PRESETS.items() if name.startswith("diversity-")]
    return [(s.name, depth) for s in studies for depth in s.depths]


def study_cells(summary: dict) -> list[dict]:
    """One cell per depth of a study's summary: what the cross-K report reads of it."""
    corpus = summary["corpus"]
    convergence = (summary.get("yardsticks") or {}).get("convergence", {})
    return [
        {
            "study": summary["study"]["name"],
            "num_tasks": corpus["num_tasks"],
            "corpus_seed": corpus["seed"],
            "depth": d["depth"],
            "seeds": d["seeds"],
            "kl_bayes_model": d["kl_bayes_model"],
            "gap_closed": d["gap_closed"],
            "model_accuracy": d["model_accuracy"],
            "bayes_accuracy": d["bayes_accuracy"],
            "best_in_context": d["best_in_context"],
            "best_in_context_accuracy": d["best_in_context_accuracy"],
            "yardsticks": d["yardsticks"],
            "prior_spread": {split: c["spread"]["kl_symmetric"] for split, c in convergence.items()},
            "prior_label": {split: c["label"] for split, c in convergence.items()},
            "verdicts": d["verdicts"],
            "seconds": d["seconds"],
        }
        for d in summary["depths"]
    ]


def learner_of(nearest: dict[str, int]) -> str:
    """The learner most of a cell's seeds are nearest ("mixture" or "prior"), "tied" when most
    seeds are tied, "mixed" when no kind has more than half of the seeds."""
    total = sum(nearest.values())
    winner = max(nearest, key=nearest.get)
    return winner if 2 * nearest[winner] > total else "mixed"


def draw_spread(first: dict, second: dict) -> dict:
    """How much the corpus draw moves each statistic of one (K, depth): the second draw's mean
    minus the first's, beside each draw's across-seed interval half-width."""

    def row(a: dict, b: dict) -> dict:
        return {
            "first": a["mean"],
            "second": b["mean"],
            "difference": b["mean"] - a["mean"] if None not in (a["mean"], b["mean"]) else None,
            "half_widths": [half_width(a), half_width(b)],
        }

    claims = {va["key"]: row(va["own"], vb["own"]) for va, vb in zip(first["verdicts"], second["verdicts"])}
    cell = {name: row(first[name], second[name]) for name in DRAWN_STATISTICS}
    for split in SPLITS:
        for name in ("mixture", "prior"):
            cell[f"kl_{name}_{split}"] = row(
                first["yardsticks"][split]["kl"][name], second["yardsticks"][split]["kl"][name]
            )
    return {
        "num_tasks": first["num_tasks"],
        "depth": first["depth"],
        "draws": [first["study"], second["study"]],
        "claims": claims,
        "statistics": cell,
    }


def half_width(stat: dict) -> float | None:
    """Half the width of an across-seed interval (None from fewer than two seeds)."""
    return None if stat.get("ci_low") is None else (stat["ci_high"] - stat["ci_low"]) / 2


SHARED_SETUP = ("model", "training")  # what every cell must share to be compared across K


def setup_of(summary: dict, section: str) -> dict:
    """A section of a study's summary as compared across studies: the model's with its type
    (HMMRoFormer's where a summary written before the type was kept has none)."""
    if section == "model":
        return {**summary["model"], "model_type": summary["model"].get("model_type") or HMM_ROFORMER}
    return summary[section]


def summarize_diversity(summaries: list[dict], sources: list[str]) -> dict:
    """The cross-K summary of the studies' summaries (`sources`: where each came from, named in
    errors). A cell given twice, a study that is not a diversity study, or studies whose models
    or training differ, are refused."""
    if not summaries:
        raise ValueError("no study given: name the folders of one or more diversity studies")
    cells, seen = [], {}
    for summary, source in zip(summaries, sources):
        name = summary["study"]["name"]
        if not name.startswith("diversity-"):
            raise ValueError(f"{source} is a study of {name!r}, not a diversity study (diversity-32, ...)")
        for section in SHARED_SETUP:
            if setup_of(summary, section) != setup_of(summaries[0], section):
                raise ValueError(
                    f"the {section} of {source} ({setup_of(summary, section)}) differs from {sources[0]}'s "
                    f"({setup_of(summaries[0], section)}): cells of one report share their models and training"
                )
        for cell in study_cells(summary):
            key = (cell["study"], cell["depth"])
            if key in seen:
                raise ValueError(
                    f"{name} at {cell['depth']} layers is in both {seen[key]} and {source}: give one of them"
                )
            seen[key] = source
            cells.append(cell)
    order = {key: index for index, key in enumerate(planned_cells())}
    cells.sort(key=lambda c: order.get((c["study"], c["depth"]), len(order)))
    for cell in cells:
        cell["learner"] = {split: learner_of(cell["yardsticks"][split]["nearest"]) for split in SPLITS}
    first = next(c for c in cells if c["verdicts"]) if cells else None
    return {
        "sources": list(sources),
        "setup": {
            "corpus": summaries[0]["corpus"],
            **{section: setup_of(summaries[0], section) for section in SHARED_SETUP},
            "yardstick_rows": summaries[0]["study"]["yardstick_rows"],
            "eval_rows": summaries[0]["study"]["eval_rows"],
        },
        "cells": cells,
        "missing": [
            f"{study} at {depth} layers" for study, depth in planned_cells() if (study, depth) not in seen
        ],
        "claims": [
            {key: v[key] for key in ("key", "figure", "claim", "statistic", "direction")}
            for v in (first["verdicts"] if first else [])
        ],
        "draw_spreads": draw_spreads(cells),
    }


def draw_spreads(cells: list[dict]) -> list[dict]:
    """`draw_spread` of every (K, depth) measured on more than one corpus draw, against draw 0."""
    out = []
    for cell in cells:
        if cell["corpus_seed"] == 0:
            continue
        base = [
            c
            for c in cells
            if (c["num_tasks"], c["depth"], c["corpus_seed"]) == (cell["num_tasks"], cell["depth"], 0)
        ]
        if base:
            out.append(draw_spread(base[0], cell))
    return out


def claim_against_k(summary: dict, key: str) -> dict[int, list[dict]]:
    """Per depth, the cells of draw 0 in order of K with claim `key`'s row: what its figure plots."""
    out: dict[int, list[dict]] = {}
    for cell in sorted(summary["cells"], key=lambda c: c["num_tasks"]):
        if cell["corpus_seed"] == 0:
            row = next(v for v in cell["verdicts"] if v["key"] == key)
            out.setdefault(cell["depth"], []).append({"num_tasks": cell["num_tasks"], **row})
    return out
