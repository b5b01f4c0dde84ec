"""A model's results, summarized for its card and the reproduction report: the parts of the
summary that `running.folders.summarize_model_folder` assembles from a model folder's files
(Figure 1's headline, the memory, the belief table), and `model_claims`, each of the paper's
claims as the study's rule reads one model: its own statistic and its effects over its floors.
"""

from __future__ import annotations

from probing.records import DECIDING_POSITIONS
from probing.results import ProbeResults

from .claims import decide_claims, model_statistics, profiles
from .evaluation import Figure1Result
from .memory import recorded_memory_equivalent


def summarize_figure1(figure1: Figure1Result) -> dict:
    """The headline in-context numbers of a Figure 1: model next to Bayes-optimal and oracle."""
    counts = figure1.demo_counts
    full, none = counts.index(max(counts)), counts.index(0)
    by = figure1.by_num_demos
    versus = figure1.model_vs_bayes

    def row(label: str, key: str, index: int) -> dict:
        return {
            "label": label,
            **{name: by[name][key][index] for name in ("model", "bayes", "oracle")},
        }

    test_length, early = figure1.layout["test_length"], figure1.early_tokens
    headline = [
        row(f"top-1 accuracy, {max(counts)} demonstrations", "accuracy", full),
        row(f"top-1 accuracy, {max(counts)} demonstrations, test tokens 1..{early}", "early_accuracy", full),
        row("top-1 accuracy, no demonstrations", "accuracy", none),
        row(f"top-1 accuracy, no demonstrations, test tokens 1..{early}", "early_accuracy", none),
        {
            "label": "argmax = Bayes-optimal argmax",
            "model": versus["agreement"],
            "bayes": 1,
            "oracle": None,
        },
        {
            "label": "KL(Bayes-optimal ‖ model), nats/token",
            "model": versus["kl_bayes_model"],
            "bayes": 0,
            "oracle": None,
        },
        {
            "label": "NLL above Bayes-optimal, nats/token",
            "model": versus["excess_nll"],
            "bayes": 0,
            "oracle": None,
        },
    ]
    return {
        "num_rows": figure1.num_rows,
        "test_length": test_length,
        "early_tokens": early,
        "headline": headline,
        "predictors": [figure1.label(name) for name in by],
        "by_num_demos": [
            {"demos": m, "accuracy": [by[name]["accuracy"][i] for name in by]} for i, m in enumerate(counts)
        ],
        "accuracy": {name: by[name]["accuracy"][full] for name in ("model", "bayes", "oracle")},
        "accuracy_no_demos": {name: by[name]["accuracy"][none] for name in ("model", "bayes", "oracle")},
        "model_vs_bayes": versus,
        "ladder": None if figure1.ladder is None else summarize_ladder(figure1.ladder),
    }


def summarize_ladder(ladder: dict, model: str = "model") -> dict:
    """A figure1.json's ladder for the cards: its rungs as measured, the best in-context
    predictor, and the share of the gap to Bayes the model closes (`hmm_datasets.scoring.predictor_ladder`)."""
    best = next(rung for rung in ladder["rungs"] if rung["name"] == ladder["best_in_context"])
    share = ladder["gap_closed"].get(model)
    return {
        "rungs": [
            {
                "label": rung["label"],
                "is_model": rung["name"] == model,
                "accuracy": rung["accuracy"],
                # a KL of about 0 can come out below it by rounding: shown as 0, not -0.000
                "kl_bayes": None if rung["kl_bayes"] is None else abs(rung["kl_bayes"]),
            }
            for rung in ladder["rungs"]
        ],
        "best_in_context": best["label"],
        "best_in_context_accuracy": best["accuracy"],
        "gap_closed": share,
        "below_in_context": ladder["below_in_context"].get(model, False),
    }


BELIEF_ROWS = (  # (belief, segment, metric) rows of the card's belief-probe table
    ("task_posterior", DECIDING_POSITIONS, "r2"),
    ("task_posterior", DECIDING_POSITIONS, "log_r2"),
    ("task_posterior", "test", "r2"),
    ("state_filter", DECIDING_POSITIONS, "r2"),
    ("state_filter_per_task", DECIDING_POSITIONS, "log_r2"),
    ("state_filter", "test", "r2"),
    ("joint_posterior", "test", "r2"),
)
METRIC_NAMES = {"r2": "R²", "log_r2": "log-space R²"}


def belief_table(probes: ProbeResults | None) -> list[dict]:
    """The belief-state probes' held-out R² per layer (`probe_results.json`), a cell per layer:
    `{"model", "twin"}` (twin None for results without it); empty for results without them."""
    if probes is None:
        return []
    records, rows = probes.record_set(), []
    for belief, segment, metric in BELIEF_ROWS:
        trained, twin = (
            [r.value for r in records.by_layer(f"belief_{belief}", metric, segment, network)]
            for network in ("trained", "twin")
        )
        if trained:
            cells = [{"model": a, "twin": b} for a, b in zip(trained, twin or [None] * len(trained))]
            name = f"{belief.replace('_', ' ')}, {METRIC_NAMES[metric]}"
            rows.append({"belief": name, "segment": segment, "cells": cells})
    return rows


def model_claims(
    figure1: Figure1Result | None, probes: ProbeResults | None, knockout: dict | None, depth: int
) -> list[dict]:
    """Each claim of `claims.CLAIMS` on one model, as the study's rule reads one seed
    (`claims.decide_claims`: its own statistic, its effects over the twin and the token-only
    baseline, the spread across probe splits, "undecided (1 seed)", or why it cannot be read:
    "n/a (no figure 1)", "n/a (no knock-out)").

    `figure1` is the model's Figure 1, `probes` its probe results and `knockout` the raw
    `knockout.json` (each None where absent); probe results written before the probe splits have
    no claims.
    """
    if probes is None or probes.splits is None:
        return []
    return decide_claims([model_statistics(profiles(figure1, probes, knockout, depth))])


def summarize_memory(lemma1: dict | None, model_memory: dict | None) -> dict | None:
    """Lemma 1 on the corpus and the model's own memory (`memory/`), with the fitted rates (None:
    no fit) and the model's memory (`memory.memory_equivalent`; None where there is none)."""
    if lemma1 is None or model_memory is None:
        return None
    return {
        "lemma1": lemma1,
        "model": model_memory,
        "mixture_rate": lemma1["mixture"]["fit"]["rate"],
        "oracle_rate": lemma1["oracle"]["fit"]["rate"],
        "equivalent": recorded_memory_equivalent(model_memory, lemma1),
    }
