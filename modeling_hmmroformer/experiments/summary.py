"""What a model folder holds, summarized for its card and the reproduction report.

A model folder written by `scripts/train.py` holds `config.json`, the corpus config, the run
config and the training results; `scripts/figure1.py` and `scripts/probe.py` add Figure 1's
and the probes' results in their default output folders, the pipeline the model's memory
(`layout` names every file). `summarize_model_folder`
turns whatever of these is present into one JSON-ready summary, which `model_cards.render`
renders into the model card and `REPORT.md`; `paper_claims` says which of the paper's claims
the numbers show.
"""

from __future__ import annotations

import json
import os
import struct
from math import prod
from pathlib import Path

import numpy as np
import yaml

from probing.plots import FIGURE7_PATTERN
from probing.run import summarize_probe_results

from . import layout


def summarize_figure1(figure1: dict) -> dict:
    """The headline in-context numbers of a `figure1.json`: model next to Bayes-optimal and oracle."""
    counts = figure1["demo_counts"]
    full, none = counts.index(max(counts)), counts.index(0)
    by = figure1["by_num_demos"]
    versus = figure1["model_vs_bayes"]

    def row(label: str, key: str, index: int) -> dict:
        return {
            "label": label,
            **{name: f"{by[name][key][index]:.3f}" for name in ("model", "bayes", "oracle")},
        }

    test_length, early = figure1["layout"]["test_length"], figure1["early_tokens"]
    headline = [
        row(f"top-1 accuracy, {max(counts)} demonstrations", "accuracy", full),
        row(f"top-1 accuracy, {max(counts)} demonstrations, test tokens 1..{early}", "early_accuracy", full),
        row("top-1 accuracy, no demonstrations", "accuracy", none),
        row(f"top-1 accuracy, no demonstrations, test tokens 1..{early}", "early_accuracy", none),
        {
            "label": "argmax = Bayes-optimal argmax",
            "model": f"{versus['agreement']:.3f}",
            "bayes": "1",
            "oracle": "",
        },
        {
            "label": "KL(Bayes-optimal ‖ model), nats/token",
            "model": f"{versus['kl_bayes_model']:.3f}",
            "bayes": "0",
            "oracle": "",
        },
        {
            "label": "NLL above Bayes-optimal, nats/token",
            "model": f"{versus['excess_nll']:.3f}",
            "bayes": "0",
            "oracle": "",
        },
    ]
    labels = figure1.get("labels", {})
    return {
        "num_rows": figure1["num_rows"],
        "test_length": test_length,
        "early_tokens": early,
        "headline": headline,
        "predictors": [labels.get(name, name) for name in by],
        "by_num_demos": [
            {"demos": m, "accuracy": [by[name]["accuracy"][i] for name in by]} for i, m in enumerate(counts)
        ],
        "accuracy": {name: by[name]["accuracy"][full] for name in ("model", "bayes", "oracle")},
        "accuracy_no_demos": {name: by[name]["accuracy"][none] for name in ("model", "bayes", "oracle")},
        "model_vs_bayes": versus,
        "ladder": summarize_ladder(figure1["ladder"]) if "ladder" in figure1 else None,
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
                "accuracy": f"{rung['accuracy']:.3f}",
                "kl_bayes": "" if rung["kl_bayes"] is None else f"{abs(rung['kl_bayes']):.3f}",  # -0.000
            }
            for rung in ladder["rungs"]
        ],
        "best_in_context": best["label"],
        "best_in_context_accuracy": best["accuracy"],
        "gap_closed": share,
        "below_in_context": ladder["below_in_context"].get(model, False),
    }


def paper_claims(figure1: dict | None, probes: dict | None) -> list[dict]:
    """Each claim of the paper with whether this model shows it and the numbers that say so.

    `figure1` is a `figure1.json`, `probes` the output of `probing.run.summarize_probe_results`.
    """
    claims = []
    if figure1 is not None:
        counts, by = figure1["demo_counts"], figure1["by_num_demos"]
        full, none = counts.index(max(counts)), counts.index(0)
        model, bayes = by["model"]["accuracy"], by["bayes"]["accuracy"]
        claims.append(
            {
                "figure": "1",
                "claim": "accuracy rises with the number of demonstrations",
                "holds": model[full] > model[none],
                "measured": f"model {model[none]:.3f} → {model[full]:.3f} (Bayes-optimal {bayes[none]:.3f} → {bayes[full]:.3f})",
                "statistic": statistic("accuracy gain from demonstrations", model[full] - model[none]),
            }
        )
        position = np.asarray(figure1["by_test_position"]["model"])
        position_bayes = np.asarray(figure1["by_test_position"]["bayes"])
        early, late = slice(1, 1 + figure1["early_tokens"]), slice(len(position) // 2, None)
        claims.append(
            {
                "figure": "1",
                "claim": "accuracy rises with the position in the test sequence",
                "holds": bool(position[late].mean() > position[early].mean()),
                "measured": f"model {position[early].mean():.3f} on test tokens 1..{figure1['early_tokens']}, "
                f"{position[late].mean():.3f} on the second half (Bayes-optimal {position_bayes[early].mean():.3f}, "
                f"{position_bayes[late].mean():.3f})",
                "statistic": statistic(
                    "second half minus early test tokens", position[late].mean() - position[early].mean()
                ),
            }
        )
    if probes is not None:
        fig2, fig3a, fig3b = (probes["patterns"][key] for key in ("figure2", "figure3a", "figure3b"))
        claims += figure2_claims(fig2)
        claims += figure3_claims(fig3a, fig3b, probes)
    for claim in claims:
        claim["holds"] = bool(claim["holds"])
    return claims


FIGURE2_PARTS = {  # part of the shuffle test -> the claim it decides, the statistic's name
    "total": (
        "upper layers' attention changes less when demonstrations are shuffled",
        "upper minus lower layers' change",
    ),
    "position_only": (
        "upper layers' attention logits depend less on position (position-only part)",
        "upper minus lower layers' position-only change",
    ),
    "weighted_attention_tv": (
        "upper layers' attention over the demonstrations moves less (TV weighted by demonstration mass)",
        "upper minus lower layers' weighted attention TV",
    ),
}


def figure2_claims(fig2: dict) -> list[dict]:
    """Figure 2's claim decided on the total change (the paper's statistic), its position-only part
    and the attention distributions' weighted TV (`probing.shuffle.shuffle_patterns`)."""
    upper, lower = fig2["upper_layers"], fig2["lower_layers"]
    parts = fig2.get("by_part") or {"total": fig2}  # results written before the parts: the total alone
    claims = []
    for part, (text, name) in FIGURE2_PARTS.items():
        if part not in parts:
            continue
        result = parts[part]
        low, high = result["upper_minus_lower_ci"]
        claims.append(
            {
                "figure": "2",
                "claim": text,
                "holds": result["upper_layers_change_less"],
                "measured": f"layers {upper} − layers {lower}: {result['upper_minus_lower']:+.3f} "
                f"(95% CI [{low:+.3f}, {high:+.3f}])",
                "statistic": statistic(name, result["upper_minus_lower"]),
            }
        )
    return claims


def figure3_claims(fig3a: dict, fig3b: dict, probes: dict) -> list[dict]:
    """Figure 3's claims, each with the statistic it is decided on (`probing.layerwise`)."""
    where = fig3a["positions"]
    peaks = fig3b["by_distance"]
    peak_text = ", ".join(
        f"k={d}: {v['peak_accuracy']:.3f} at layer {v['peak_layer']} [{v['peak_layer_ci'][0]:.0f}, {v['peak_layer_ci'][1]:.0f}]"
        for d, v in peaks.items()
    )
    return [
        {
            "figure": "3(a)",
            "claim": "task identity becomes decodable in upper layers",
            "holds": fig3a["task_rises_across_layers"],
            "measured": f"task probe's headroom fraction on {where} positions {_text(fig3a['task_first_layer_fraction'])} "
            f"(embeddings) → {_text(fig3a['task_last_layer_fraction'])} (last layer), gain 95% CI "
            f"{_interval(fig3a['task_gain_ci'])} (Bayes-optimal posterior over all positions {probes['task_bayes_accuracy']:.3f})",
            "statistic": statistic(
                f"task headroom fraction on {where}, last layer minus embeddings",
                _difference(fig3a["task_last_layer_fraction"], fig3a["task_first_layer_fraction"]),
            ),
        },
        {
            "figure": "3(a)",
            "claim": "the hidden state is decodable before the task",
            "holds": fig3a["hidden_state_before_task"],
            "measured": f"on {where} positions, the task's first layer reaching f of its headroom minus the hidden "
            f"state's, mean over f = 0.50..0.95, in units of depth: {_text(fig3a['mean_reach_difference'], '+.3f')} "
            f"(95% CI {_interval(fig3a['mean_reach_difference_ci'])})",
            "statistic": statistic(
                f"task minus hidden-state first-reach depth on {where}", fig3a["mean_reach_difference"]
            ),
        },
        {
            "figure": "3(b)",
            "claim": "previous tokens are decoded less well the further back they are",
            "holds": fig3b["accuracy_falls_with_distance"],
            "measured": f"peaks {peak_text}; nearest minus farthest {fig3b['accuracy_drop']:+.3f} "
            f"(95% CI {_interval(fig3b['accuracy_drop_ci'])})",
            "statistic": statistic("peak accuracy, nearest minus farthest token", fig3b["accuracy_drop"]),
        },
        {
            "figure": "3(b)",
            "claim": "previous-token accuracy rises, then falls in upper layers",
            "holds": fig3b["all_rise_then_fall"],
            "measured": ", ".join(
                f"k={d}: {'yes' if v['rises_then_falls'] else 'no'}" for d, v in peaks.items()
            ),
            "statistic": statistic(
                "share of distances whose curve rises then falls",
                np.mean([v["rises_then_falls"] for v in peaks.values()]),
            ),
        },
        {
            "figure": "3(b)",
            "claim": "the peak layer moves up with the distance",
            "holds": fig3b["peak_layer_moves_up"],
            "measured": ", ".join(f"k={d}: layer {v['peak_layer']}" for d, v in peaks.items())
            + f"; farthest minus nearest {fig3b['peak_layer_shift']:+d} layers (95% CI {_interval(fig3b['peak_layer_shift_ci'], '+.0f')})",
            "statistic": statistic(
                "peak layer, farthest minus nearest token, / L",
                fig3b["peak_layer_shift"] / probes["num_hidden_layers"],
            ),
        },
    ]


def _difference(a, b):
    return None if a is None or b is None else a - b


def _text(value, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def _interval(values, spec: str = "+.3f") -> str:
    return f"[{_text(values[0], spec)}, {_text(values[1], spec)}]"


def statistic(name: str, value) -> dict:
    """The number a claim is decided on (averaged over seeds by the study)."""
    return {"name": name, "value": None if value is None else float(value)}


def safetensors_parameter_count(path: str | os.PathLike) -> int:
    """Number of values stored in a safetensors file, read from its header only."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return sum(prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")


def summarize_model_folder(folder: str | os.PathLike) -> dict:
    """Everything the card and the report show, from the files of a model folder (module docstring)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} has no config.json: pass a model folder written by scripts/train.py.")
    config = json.loads((folder / "config.json").read_text())
    summary: dict = {
        "model": {
            key: config.get(key)
            for key in (
                "num_hidden_layers",
                "num_attention_heads",
                "hidden_size",
                "intermediate_size",
                "vocab_size",
                "norm_placement",
            )
        }
    }
    if (folder / "model.safetensors").is_file():
        summary["model"]["num_parameters"] = safetensors_parameter_count(folder / "model.safetensors")
    optional = {
        "corpus": layout.CORPUS_CONFIG_JSON,
        "training": layout.TRAIN_RESULTS_JSON,
        **layout.ANALYSIS_FILES,
    }
    raw = {name: _read_json(folder / path) for name, path in optional.items()}
    summary["corpus"] = raw["corpus"]
    summary["training"] = raw["training"]
    run_config = folder / layout.RUN_CONFIG_YAML
    summary["run_config"] = yaml.safe_load(run_config.read_text()) if run_config.is_file() else None
    summary["in_context"] = summarize_figure1(raw["figure1"]) if raw["figure1"] else None
    summary["probes"] = summarize_probe_results(raw["probes"]) if raw["probes"] else None
    summary["memory"] = summarize_memory(raw["lemma1"], raw["model_memory"])
    summary["claims"] = paper_claims(raw["figure1"], summary["probes"])
    figure7 = folder.glob(f"{layout.PROBES}/{FIGURE7_PATTERN.format(row='*')}")
    summary["figure7"] = sorted(str(p.relative_to(folder)) for p in figure7)
    summary["figures"] = dict(layout.CARD_FIGURES)
    return summary


def summarize_memory(lemma1: dict | None, model_memory: dict | None) -> dict | None:
    """Lemma 1 on the corpus and the model's own memory (`memory/`), with the fitted rates as text."""
    if lemma1 is None or model_memory is None:
        return None

    def rate(variant: str) -> str:
        fit = lemma1[variant]["fit"]
        return "n/a" if fit["rate"] is None else f"{fit['rate']:.3f}"

    return {
        "lemma1": lemma1,
        "model": model_memory,
        "mixture_rate": rate("mixture"),
        "oracle_rate": rate("oracle"),
    }


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None
