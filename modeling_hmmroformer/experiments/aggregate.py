"""A study's numbers across seeds and depths: every model's record (its distance to Bayes, its
claims, its per-layer curves, its memory), each claim counted over seeds with the mean of its
statistic and a t interval, and the tables the study report shows.

Plain data in, plain data out; `summarize_study` alone reads the model folders' JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from hmm_datasets.corpus import open_corpus
from probing.run import summarize_probe_results

from . import layout
from .plots import SHUFFLE_PARTS
from .settings import RunConfig, Settings, config_for_corpus
from .summary import paper_claims
from .verdicts import across_seeds


def aggregate_claims(claims_per_seed: list[list[dict]]) -> list[dict]:
    """One row per claim: in how many seeds it holds, and its statistic across seeds.

    Each seed's claims are `paper_claims` records (`figure`, `claim`, `holds`, `statistic`);
    claims are matched by their text.
    """
    order, by_claim = [], {}
    for claims in claims_per_seed:
        for claim in claims:
            key = (claim["figure"], claim["claim"])
            if key not in by_claim:
                order.append(key)
                by_claim[key] = []
            by_claim[key].append(claim)
    rows = []
    for figure, text in order:
        seen = by_claim[(figure, text)]
        statistic = seen[0].get("statistic") or {}
        rows.append(
            {
                "figure": figure,
                "claim": text,
                "holds_in": sum(bool(c["holds"]) for c in seen),
                "seeds": len(seen),
                "statistic": statistic.get("name"),
                **across_seeds([(c.get("statistic") or {}).get("value") for c in seen]),
            }
        )
    return rows


def claims_table(depths: list[dict]) -> list[dict]:
    """Claim x depth: one row per claim (in the order first seen), one cell per depth."""
    rows, index = [], {}
    for column, depth in enumerate(depths):
        for claim in depth["claims"]:
            key = (claim["figure"], claim["claim"])
            if key not in index:
                index[key] = len(rows)
                rows.append(
                    {**{k: claim[k] for k in ("figure", "claim", "statistic")}, "cells": [None] * len(depths)}
                )
            rows[index[key]]["cells"][column] = claim
    return rows


def per_layer(records: list[dict], target: str, metric: str, positions: str = "all") -> list[float | None]:
    """Values of a per-layer metric (mean over heads), in layer order."""
    chosen = sorted(
        (
            r
            for r in records
            if (r["target"], r["metric"], r.get("positions", "all")) == (target, metric, positions)
            and r["layer"] is not None
            and r["head"] is None
        ),
        key=lambda r: r["layer"],
    )
    return [r["value"] for r in chosen]


def model_curves(probes: dict, depth: int) -> dict:
    """The per-layer curves the study plots against relative depth l/L (`depth` layers)."""
    records = probes["records"]
    shuffle = {metric: per_layer(records, "shuffle", metric) for metric in SHUFFLE_PARTS}
    return {
        "attention_depth": [layer / depth for layer in range(1, depth + 1)],
        "probe_depth": probes["relative_depth"],
        "shuffle": {metric: values for metric, values in shuffle.items() if values},
        "headroom_demo1": {
            t: per_layer(records, t, "headroom_fraction", "demo1") for t in ("task", "hidden_state")
        },
        "previous_tokens": {
            str(d): per_layer(records, f"previous_token_{d}", "accuracy")
            for d in probes["settings"]["distances"]
        },
    }


def model_record(depth: int, seed: int, folder: Path) -> dict:
    """What one model's analyses say: its distance to Bayes, its claims, curves and memory."""
    fig1 = _read(folder / layout.ANALYSIS_FILES["figure1"])
    probes = _read(folder / layout.ANALYSIS_FILES["probes"])
    memory = _read(folder / layout.ANALYSIS_FILES["model_memory"])
    peaks = probes["patterns"]["figure3b"]["by_distance"]
    return {
        "depth": depth,
        "seed": seed,
        "model_vs_bayes": fig1["model_vs_bayes"],
        "ladder": fig1.get("ladder"),
        "claims": paper_claims(fig1, summarize_probe_results(probes)),
        "curves": model_curves(probes, depth),
        "peak_layers": {distance: peak["peak_layer"] for distance, peak in peaks.items()},
        "memory": memory,
    }


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def peak_row(depth: int, records: list[dict]) -> dict:
    """One depth's Figure 3(b) peak layer per distance: per seed and across seeds."""
    distances = list(records[0]["peak_layers"])
    return {
        "depth": depth,
        "by_distance": {
            d: {
                "per_seed": [r["peak_layers"][d] for r in records],
                **across_seeds([r["peak_layers"][d] for r in records]),
            }
            for d in distances
        },
    }


def memory_row(depth: int, records: list[dict]) -> dict:
    """One depth's fixed-memory behaviour across seeds (`memory.model_memory`)."""
    memories = [r["memory"] for r in records]
    at_best = [m["tv_full_vs_bayes_memory"][m["memories"].index(m["best_memory"])] for m in memories]
    cut = [across_seeds(list(values)) for values in zip(*(m["tv_cut_vs_full"] for m in memories))]
    return {
        "depth": depth,
        "best": [m["best_memory"] for m in memories],
        "tv_at_best": across_seeds(at_best),
        "tv_full_bayes": across_seeds([m["full_vs_bayes"]["tv"] for m in memories]),
        "cut_tv": [f"{c['mean']:.3f}" if c["mean"] is not None else "n/a" for c in cut],
    }


def ladder_across_seeds(ladders: list[dict | None]) -> dict:
    """The models of one depth on the ladder: accuracy, the best in-context predictor's, the
    share of the gap to Bayes closed (across seeds), and how many seeds are below the baseline."""
    if not ladders or any(ladder is None for ladder in ladders):
        return {}
    accuracy = [{rung["name"]: rung["accuracy"] for rung in ladder["rungs"]} for ladder in ladders]
    best = [ladder["best_in_context"] for ladder in ladders]
    labels = {rung["name"]: rung["label"] for rung in ladders[0]["rungs"]}
    return {
        "model_accuracy": across_seeds([a["model"] for a in accuracy]),
        "best_in_context": labels[best[0]]
        if len(set(best)) == 1
        else ", ".join(sorted({labels[b] for b in best})),
        "best_in_context_accuracy": across_seeds([a[b] for a, b in zip(accuracy, best)]),
        "bayes_accuracy": across_seeds([a["bayes"] for a in accuracy]),
        "gap_closed": across_seeds([ladder["gap_closed"]["model"] for ladder in ladders]),
        "below_in_context": sum(ladder["below_in_context"]["model"] for ladder in ladders),
    }


def summarize_study(
    settings: Settings,
    run: RunConfig,
    models: list[tuple[int, int, Path]],
    corpus_folder: Path,
    lemma1_folder: Path,
) -> dict:
    """Claims per depth across seeds, next to each depth's KL and agreement with Bayes.

    `models` are (depth, seed, model folder) of every model; `run` is the study's run config.
    """
    records = [model_record(depth, seed, folder) for depth, seed, folder in models]
    corpus = open_corpus(str(corpus_folder))
    depths = []
    for depth in dict.fromkeys(depth for depth, _, _ in models):  # in the order of the grid
        mine = [r for r in records if r["depth"] == depth]
        depths.append(
            {
                "depth": depth,
                "seeds": [r["seed"] for r in mine],
                "kl_bayes_model": across_seeds([r["model_vs_bayes"]["kl_bayes_model"] for r in mine]),
                "agreement": across_seeds([r["model_vs_bayes"]["agreement"] for r in mine]),
                **ladder_across_seeds([r["ladder"] for r in mine]),
                "claims": aggregate_claims([r["claims"] for r in mine]),
            }
        )
    model = config_for_corpus(corpus.config, **run.model_sizes())
    return {
        "study": settings.to_dict(),
        "corpus": corpus.config.to_dict(),
        "model": {
            key: getattr(model, key) for key in ("hidden_size", "num_attention_heads", "norm_placement")
        },
        "training": {
            key: run.training.get(key)
            for key in ("max_steps", "per_device_train_batch_size", "learning_rate")
        },
        "depths": depths,
        "claims_table": claims_table(depths),
        "peak_table": [
            peak_row(d["depth"], [r for r in records if r["depth"] == d["depth"]]) for d in depths
        ],
        "memory_table": [
            memory_row(d["depth"], [r for r in records if r["depth"] == d["depth"]]) for d in depths
        ],
        "lemma1": _read(lemma1_folder / layout.LEMMA1_JSON),
        "models": records,
        "figures": {**layout.STUDY_FIGURES, "lemma1": f"{layout.LEMMA1}/{layout.LEMMA1_PNG}"},
    }
