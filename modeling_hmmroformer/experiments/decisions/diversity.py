"""The studies across task diversity K (a family: the task-diversity study `diversity-*`, or the
inference study `inference-*` that trains the same network past its in-context transition):
every study cell (a corpus draw of K HMMs and a depth) placed on its yardsticks and its in-context
ladder, gathered from the studies' own summaries (`aggregate.summarize_study`: each study folder's
results.json, with its models' records); the claims decided per (K, depth) over every draw
measured there, seeds nested in draws, Holm across every claim of the report (`decide_groups`);
what the corpus draw moves (a draw against draw 0: the same prior and K, another parameter
seed); and, where the models kept networks over training, each (K, depth) over training
(`over_training`: described, not decided).

Plain data in, plain data out: `scripts/diversity_report.py` reads the folders and writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from probing.architecture import HMM_ROFORMER

from ..analyses.claims import (
    ADDED_LATER,
    CLAIMS,
    Claim,
    claim_words,
    claims_before_added,
    decide_report,
    model_statistics,
)
from ..analyses.development import Development, development_from_dict
from ..analyses.ladder_gate import LEARNERS
from ..analyses.record import ModelRecord
from ..settings import PIPELINES, pipeline_run_config
from .aggregate import (
    StudySummary,
    counted_statistics,
    ladder_across_seeds,
    ladder_places,
    time_row,
    yardsticks_row,
)
from .verdicts import across_seeds

DIVERSITY_TITLE = "# Retrieval or inference?"  # the report's first line starts so
FAMILIES = ("diversity", "inference")  # the studies across K a report gathers, by name prefix
SPLITS = ("test", "test_unseen")  # seen tasks, unseen tasks
# the statistics of a cell whose change between corpus draws the report shows, beside the claims'
DRAWN_STATISTICS = {
    "kl_bayes_model": "KL(Bayes ‖ model) on the test split",
    "model_accuracy": "model top-1 on the test split",
}


def family_of(study: str) -> str | None:
    """The family (`FAMILIES`) of a study by its name: "diversity-512" is a diversity study,
    "inference-512-draw0" an inference study; None for any other study."""
    return next((family for family in FAMILIES if study.startswith(f"{family}-")), None)


def planned_cells(family: str = "diversity") -> list[tuple[str, int]]:
    """(study, depth) of every cell the named studies of a family plan, in the report's order."""
    studies = [s for name, s in PIPELINES.items() if family_of(name) == family]
    return [(s.name, depth) for s in studies for depth in s.depths]


def study_cells(summary: StudySummary) -> list[dict]:
    """One cell per depth of a study's summary: what the cross-K report reads of it."""
    return [
        cell_from_records(
            summary.name,
            [r for r in summary.models if r.depth == depth],
            summary.yardsticks,
            summary.corpus["num_tasks"],
            summary.corpus["seed"],
            summary.corpus.get("emission_mixing", 0.0),
        )
        for depth in dict.fromkeys(r.depth for r in summary.models)  # the grid's order
    ]


def cell_from_records(
    study: str,
    records: list[ModelRecord],
    facts: dict | None,
    num_tasks: int,
    corpus_seed: int,
    emission_mixing: float = 0.0,
) -> dict:
    """One cell of the cross-K report (a study's models of one depth) from its models' records and
    its corpus's yardstick facts (`facts`: the yardsticks stage's JSON, None without unseen
    tasks), as the study's own summary (`aggregate.summarize_study`) measures them; its corpus's
    K, draw and `emission_mixing` (0: the token as the prior draws it; docs/corpus.md)."""
    if facts is None and any(r.yardsticks is not None for r in records):
        raise ValueError(
            f"{study}'s models were placed on its corpus's yardsticks, whose facts are not given: "
            "put the yardsticks stage's yardsticks.json beside its records"
        )
    convergence = (facts or {}).get("convergence", {})
    spreads = {split: c["spread"]["kl_symmetric"] for split, c in convergence.items()}
    ladder = ladder_across_seeds([r.ladder for r in records])
    return {
        "study": study,
        "num_tasks": num_tasks,
        "emission_mixing": emission_mixing,
        "corpus_seed": corpus_seed,
        "depth": records[0].depth,
        "seeds": [r.seed for r in records],
        "kl_bayes_model": across_seeds([r.model_vs_bayes["kl_bayes_model"] for r in records]),
        **{key: ladder[key] for key in LADDER_KEYS},
        "yardsticks": yardsticks_row([r.yardsticks for r in records], spreads),
        "prior_spread": spreads,
        "prior_label": {split: c["label"] for split, c in convergence.items()},
        "seconds": time_row([r.seconds for r in records]),
    }


# what a cell reads of its models' place on the ladder (`aggregate.ladder_across_seeds`)
LADDER_KEYS = (
    "gap_closed",
    "model_accuracy",
    "bayes_accuracy",
    "best_in_context",
    "best_in_context_accuracy",
)


def learner_of(counts: dict[str, int]) -> str:
    """The learner (`ladder_gate.LEARNERS`) more than half of a cell's seeds are, "mixed" when
    none is."""
    total = sum(counts.values())
    winner = max(counts, key=counts.get)
    return winner if 2 * counts[winner] > total else "mixed"


def place_cell(cell: dict, records: list[ModelRecord], ladder: dict | None) -> dict:
    """A study cell with its models' place on the ladder (`aggregate.ladder_places`), its learner,
    and each claim's own statistic across its seeds, as today's claims measure it from the
    records (what the corpus draw moves, `draw_spread`)."""
    places = ladder_places(records, ladder)
    statistics = [model_statistics(r.splits, r.patching) for r in records]
    return {
        **cell,
        "ladder_places": places,
        "learner": learner_of(places["learners"]),
        "own": {claim.key: across_seeds([s[claim.key]["own"] for s in statistics]) for claim in CLAIMS},
    }


def decide_groups(
    cells: list[dict],
    statistics: dict[tuple[int, float, int], list[dict]],
    claims: tuple[Claim, ...] = CLAIMS,
) -> list[dict]:
    """The claims (`claims`) decided per (K, emission mixing, depth) over the study cells measured
    there (`cells`, placed), from every seed's statistics (`group_statistics` of those cells),
    seeds nested in corpus draws, Holm across every claim of every group
    (`claims.decide_report`)."""
    groups = grouped_cells(cells)
    decided = decide_report(list(statistics.values()), claims)
    out = []
    for (num_tasks, mixing, depth), members, rows in zip(groups, groups.values(), decided):
        learners = {name: sum(c["ladder_places"]["learners"][name] for c in members) for name in LEARNERS}
        out.append(
            {
                "num_tasks": num_tasks,
                "emission_mixing": mixing,
                "depth": depth,
                "draws": [c["corpus_seed"] for c in members],
                "studies": [c["study"] for c in members],
                "num_seeds": sum(len(c["seeds"]) for c in members),
                "learners": learners,
                "verdicts": rows,
            }
        )
    return out


def labels_before_added(cells: list[dict], statistics: dict[tuple[int, float, int], list[dict]]) -> dict:
    """The verdicts of the report's family before the claims added later (`claims.ADDED_LATER`),
    from the same statistics (`decide_groups`): the claims they are given without, and per cell
    key each other claim's printed verdict."""
    return {
        "without": list(ADDED_LATER),
        "groups": [
            {
                "num_tasks": group["num_tasks"],
                "emission_mixing": group["emission_mixing"],
                "depth": group["depth"],
                "labels": {row["key"]: row["label"] for row in group["verdicts"]},
            }
            for group in decide_groups(cells, statistics, claims_before_added())
        ],
    }


def cell_key(cell: dict) -> tuple[int, float, int]:
    """What the report decides a claim over: (K, emission mixing, depth). Corpora of one K whose
    tokens hide the state to another degree are other cells (docs/corpus.md); a cell of a
    report written before the mixing existed has none (0)."""
    return cell["num_tasks"], cell.get("emission_mixing", 0.0), cell["depth"]


def on_drawn_tokens(summary: dict) -> dict:
    """The summary's cells and decided groups on corpora whose emissions are the prior's draws
    (emission mixing 0): what the figures against K and over training draw. A cell whose token
    hides the state is another corpus at the same K, reported in the tables."""
    kept = {key: [c for c in summary[key] if not c.get("emission_mixing")] for key in ("cells", "decided")}
    return {**summary, **kept}


def grouped_cells(cells: list[dict]) -> dict[tuple[int, float, int], list[dict]]:
    """The study cells by (K, emission mixing, depth) (`cell_key`), in the order each first appears."""
    groups: dict[tuple[int, float, int], list[dict]] = {}
    for cell in cells:
        groups.setdefault(cell_key(cell), []).append(cell)
    return groups


def group_statistics(
    cells: list[dict], records: dict[tuple[str, int], list[ModelRecord]], ladders: dict
) -> dict[tuple[int, int], list[dict[str, dict]]]:
    """Per (K, depth) (`grouped_cells`' order), every seed's statistics as the rule counts them
    (`aggregate.counted_statistics`: the ladder gate, tagged with the seed's corpus draw), over
    the study cells measured there; a cell needs its `study`, `depth`, `num_tasks` and
    `corpus_seed` (and `emission_mixing` where not 0)."""
    return {
        key: [
            counted_statistics(r, ladders.get(c["study"]), c["corpus_seed"])
            for c in members
            for r in records[(c["study"], c["depth"])]
        ]
        for key, members in grouped_cells(cells).items()
    }


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

    claims = {key: row(first["own"][key], second["own"][key]) for key in first["own"]}
    cell = {name: row(first[name], second[name]) for name in DRAWN_STATISTICS}
    for split in SPLITS:
        for name in ("mixture", "prior"):
            cell[f"kl_{name}_{split}"] = row(
                first["yardsticks"][split]["kl"][name], second["yardsticks"][split]["kl"][name]
            )
    return {
        "num_tasks": first["num_tasks"],
        "emission_mixing": first.get("emission_mixing", 0.0),
        "depth": first["depth"],
        "draws": [first["study"], second["study"]],
        "claims": claims,
        "statistics": cell,
    }


def half_width(stat: dict) -> float | None:
    """Half the width of an across-seed interval (None from fewer than two seeds)."""
    return None if stat.get("ci_low") is None else (stat["ci_high"] - stat["ci_low"]) / 2


SHARED_SETUP = ("model", "training")  # what every cell must share to be compared across K


def setup_of(summary: StudySummary, section: str) -> dict:
    """A section of a study's summary as compared across studies: the model's with its type
    (HMMRoFormer's where a summary written before the type was kept has none)."""
    if section == "model":
        return {**summary.model, "model_type": summary.model.get("model_type") or HMM_ROFORMER}
    return getattr(summary, section)


def summarize_diversity(summaries: list[StudySummary], sources: list[str]) -> dict:
    """The cross-K summary of the studies' summaries (`sources`: where each came from, named in
    errors), with their models' records (`models`) and their corpora's ladder facts. A cell
    given twice, a study that is not a diversity study, or studies whose models or training
    differ, are refused."""
    if not summaries:
        raise ValueError("no study given: name the folders of one or more diversity studies")
    family = family_of(summaries[0].name)
    cells, seen = [], {}
    for summary, source in zip(summaries, sources):
        name = summary.name
        if family_of(name) is None:
            raise ValueError(
                f"{source} is a study of {name!r}, not a diversity study (diversity-32, inference-512-draw0, ...)"
            )
        if family_of(name) != family:
            raise ValueError(
                f"{source} is an {family_of(name)} study and {sources[0]} a {family} study: "
                "one report gathers the studies of one family"
            )
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
    records = {
        (s.name, depth): [r for r in s.models if r.depth == depth]
        for s in summaries
        for depth in {r.depth for r in s.models}
    }
    ladders = {s.name: (s.yardsticks or {}).get("ladder") for s in summaries}
    return {
        "family": family,
        "sources": list(sources),
        "setup": {
            "corpus": summaries[0].corpus,
            **{section: setup_of(summaries[0], section) for section in SHARED_SETUP},
            "yardstick_rows": summaries[0].study["yardstick_rows"],
            "eval_rows": summaries[0].study["eval_rows"],
        },
        "cells": cells,
        "missing": [
            f"{study} at {depth} layers"
            for study, depth in planned_cells(family)
            if (study, depth) not in seen
        ],
        **decided_summary(cells, records, ladders, family),
    }


def decided_summary(
    cells: list[dict],
    records: dict[tuple[str, int], list[ModelRecord]],
    ladders: dict,
    family: str = "diversity",
) -> dict:
    """The parts of the cross-K summary the rule decides, from the study cells and their models'
    records: the cells placed on their ladders (`place_cell`) in the planned order, the claims,
    the groups decided (`decide_groups`), what the corpus draw moves, and each (K, depth) over
    training (`over_training`)."""
    order = {key: index for index, key in enumerate(planned_cells(family))}
    placed = sorted(
        (place_cell(c, records[(c["study"], c["depth"])], ladders.get(c["study"])) for c in cells),
        key=lambda c: order.get((c["study"], c["depth"]), len(order)),
    )
    statistics = group_statistics(placed, records, ladders)  # measured once, decided in both families
    return {
        "cells": placed,
        "claims": claim_words(),
        "decided": decide_groups(placed, statistics),
        "before_added": labels_before_added(placed, statistics),
        "draw_spreads": draw_spreads(placed),
        "ladders": {
            study: ladders[study] for study in in_planned_order(ladders, family) if ladders[study] is not None
        },
        "over_training": over_training(placed, records),
        "patching": patching_rows(placed, records),
    }


def in_planned_order(studies: Iterable[str], family: str = "diversity") -> list[str]:
    """`studies` in the planned order of their cells (`planned_cells`), those not planned after
    them in the order given: a report decided again lists a study recorded since in its place,
    not last."""
    order = {study: index for index, study in enumerate(dict.fromkeys(s for s, _ in planned_cells(family)))}
    return sorted(studies, key=lambda study: order.get(study, len(order)))


def redecide_diversity(
    summary: dict, records: dict[tuple[str, int], list[ModelRecord]], facts: dict[str, dict | None]
) -> dict:
    """A committed cross-K summary decided again by today's rule from its models' committed
    records (`records`: (study, depth) -> records; `facts`: study -> its corpus's yardstick facts,
    None where not measured): every cell summarized again from its records (`cell_from_records`),
    so a model recorded since the report was written joins its cell and a (study, depth) recorded
    since gets its own; every part the rule decides replaced, the rest kept."""
    family = summary.get("family", "diversity")
    check_shared_setup(list(dict.fromkeys(study for study, _ in records)))
    cells = [
        cell_from_records(study, mine, facts.get(study), *registered_corpus(study))
        for (study, _), mine in records.items()
    ]
    ladders = {study: (found or {}).get("ladder") for study, found in facts.items()}
    present = {(c["study"], c["depth"]) for c in cells}
    return {
        **summary,
        "missing": [
            f"{study} at {depth} layers"
            for study, depth in planned_cells(family)
            if (study, depth) not in present
        ],
        **decided_summary(cells, records, ladders, family),
    }


def check_shared_setup(studies: list[str]) -> None:
    """`ValueError` where the named studies (`PIPELINES`) train other models or under another
    training than the first: the cells of one report share them (`SHARED_SETUP`), so a study of
    another width or recipe gets a report of its own."""
    if not studies:
        return
    first, shared = studies[0], pipeline_run_config(PIPELINES[studies[0]])
    for study in studies[1:]:
        run = pipeline_run_config(PIPELINES[study])
        for section in SHARED_SETUP:
            if getattr(run, section) != getattr(shared, section):
                raise ValueError(
                    f"the {section} of {study} differs from {first}'s: cells of one report share their "
                    f"models and training, so give {study}'s records a report folder of their own"
                )


def registered_corpus(study: str) -> tuple[int, int, float]:
    """(K, corpus seed, emission mixing) of the corpus a named study (`PIPELINES`) trains on."""
    corpus = pipeline_run_config(PIPELINES[study]).corpus_config()
    return corpus.num_tasks, corpus.seed, corpus.emission_mixing


def draw_spreads(cells: list[dict]) -> list[dict]:
    """`draw_spread` of every (K, depth) measured on more than one corpus draw, against draw 0."""
    out = []
    for cell in cells:
        if cell["corpus_seed"] == 0:
            continue
        base = [c for c in cells if cell_key(c) == cell_key(cell) and c["corpus_seed"] == 0]
        if base:
            out.append(draw_spread(base[0], cell))
    return out


def claim_against_k(summary: dict, key: str) -> dict[int, list[dict]]:
    """Per depth, the decided groups in order of K with claim `key`'s row: what its figure plots."""
    out: dict[int, list[dict]] = {}
    for group in sorted(summary["decided"], key=lambda g: g["num_tasks"]):
        row = next(v for v in group["verdicts"] if v["key"] == key)
        out.setdefault(group["depth"], []).append({"num_tasks": group["num_tasks"], **row})
    return out


# ---- the activation patching of each patched model beside its twin's, described, not decided -----
PATCHED_NETWORKS = {"trained": "model", "twin": "control"}  # report name -> `PatchingResult` field


def patching_rows(cells: list[dict], records: dict[tuple[str, int], list[ModelRecord]]) -> list[dict]:
    """Each patched model of the cells, in their order, its untrained twin's readings beside its
    own (`patching_reading`): what the patching claim reads (`claims.measure_state_carried_lower`),
    so a reader sees the floor's size beside each verdict. Described, not decided."""
    return [
        {
            **{key: cell[key] for key in ("study", "num_tasks", "emission_mixing", "depth", "corpus_seed")},
            "seed": record.seed,
            "site_names": record.patching["model"]["site_names"],
            "networks": {
                network: patching_reading(record.patching[part])
                for network, part in PATCHED_NETWORKS.items()
                if record.patching.get(part) is not None
            },
        }
        for cell in cells
        for record in records[(cell["study"], cell["depth"])]
        if record.patching is not None
    ]


def patching_reading(result: dict) -> dict:
    """One network's patching (`probing.patching.PatchingResult.to_dict`'s `model` or `control`):
    the task and state donors' pairs, whole effect (nats) and share of it by site, the
    `state_carried_lower` statistic and the same-donor control's largest move."""
    donors = result["donors"]
    return {
        **{
            f"{kind}_{field}": donors[kind][field]
            for kind in ("task", "state")
            for field in ("pairs", "effect_nats", "shares")
        },
        "state_carried_lower": result["state_carried_lower"],
        "same_donor_max_nats": result["same_donor_max_nats"],
    }


# ---- over training: the networks each model kept (`development`), described, not decided ---------
def over_training(cells: list[dict], records: dict[tuple[str, int], list[ModelRecord]]) -> list[dict]:
    """Per (K, depth) whose models kept networks over training, in the cells' order: each kept
    step on each split across the models of every draw (`development_places`), and each claim's
    statistic at the steps every model probed (`development_claims`). Described across models,
    not decided: the rule decides the final networks only."""
    groups: dict[tuple[int, float, int], list[dict]] = {}
    for cell in cells:
        kept = [r for r in records[(cell["study"], cell["depth"])] if r.development]
        if kept:
            groups.setdefault(cell_key(cell), []).extend(kept)
    return [
        {
            "num_tasks": num_tasks,
            "emission_mixing": mixing,
            "depth": depth,
            "num_models": len(models),
            "places": development_places([development_from_dict(r.development) for r in models]),
            "claims": development_claims(models),
        }
        for (num_tasks, mixing, depth), models in groups.items()
    ]


def development_places(developments: list[Development]) -> dict[str, list[dict]]:
    """Per split, per step every model kept: the training tokens, KL from the split's reference,
    the best rung's KL and prior-level Bayes's (mean [95% t interval] across models), top-1, how
    many models are past the ladder, and the models' phase labels counted."""
    steps = sorted(set.intersection(*({n.step for n in d.networks} for d in developments)))
    splits = [s for s in SPLITS if all(s in d.networks[-1].splits for d in developments)]
    out = {}
    for split in splits:
        rows = []
        for step in steps:
            at = [next(n for n in d.networks if n.step == step) for d in developments]
            places = [n.splits[split] for n in at]
            rows.append(
                {
                    "step": step,
                    "tokens": at[0].tokens,
                    "reference": places[0].reference,
                    "kl_reference": across_seeds([p.distances[p.reference] for p in places]),
                    "best_rung_kl": across_seeds([p.best_rung_kl for p in places]),
                    "kl_prior": across_seeds([p.distances.get("prior") for p in places]),
                    "accuracy": across_seeds([p.accuracy for p in places]),
                    "past": sum(p.past_ladder for p in places),
                    "labels": dict(Counter(p.label for p in places).most_common()),
                }
            )
        out[split] = rows
    return out


def development_claims(records: list[ModelRecord]) -> dict[str, list[dict]]:
    """Per claim, at each step every model probed (`development_statistics`): its own statistic
    and its effect over the untrained twin (the training's own step-0 network), mean [95% t
    interval] across models; empty where no model was probed over training."""
    by_step = [r.development_statistics or {} for r in records]
    steps = sorted(set.intersection(*(set(map(int, s)) for s in by_step)))
    out: dict[str, list[dict]] = {}
    for claim in CLAIMS:
        rows = []
        for step in steps:
            # a record written before a claim existed has no statistic of it
            found = [s[str(step)].get(claim.key, {"own": None, "floors": {}}) for s in by_step]
            twin = [
                f["own"] - f["floors"]["twin"]
                if f["own"] is not None and f["floors"].get("twin") is not None
                else None
                for f in found
            ]
            rows.append(
                {
                    "step": step,
                    "own": across_seeds([f["own"] for f in found]),
                    "over_twin": across_seeds(twin),
                }
            )
        if rows and any(row["own"]["n"] for row in rows):
            out[claim.key] = rows
    return out
