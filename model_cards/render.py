"""Render the model card and the reproduction report from what a model folder holds.

A model folder written by `scripts/train.py` holds `config.json`, the corpus config
(`hmm_mixture_config.json`), the run config (`training_config.yaml`) and
`train_results.json`; `scripts/evaluate.py` and `scripts/probe.py` add `figure1/figure1.json`
and `probes/probe_results.json` (their default output folders). `summarize_model_folder`
turns whatever of these is present into one JSON-ready summary, which both the model card
and `REPORT.md` render (`results.md` is the section they share).
"""

from __future__ import annotations

import json
import os
import struct
from math import prod
from pathlib import Path

import jinja2
import numpy as np
import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from hmm_datasets.hmm_mixture import CITATION
from probing.layerwise import chance_and_ceiling_cells, find, probe_targets, table_cells

from . import MODEL_CARD_MARKER, MODEL_CARD_TEMPLATE, REPORT_TEMPLATE, RESULTS_TEMPLATE

FIGURE1_JSON = Path("figure1") / "figure1.json"
PROBES_JSON = Path("probes") / "probe_results.json"
FIGURES = {
    "figure1": "figure1/figure1.png",
    "figure2": "probes/figure2_shuffle.png",
    "figure3a": "probes/figure3a_hidden_state_task.png",
    "figure3b": "probes/figure3b_previous_tokens.png",
}


# ---- numbers -------------------------------------------------------------------------------
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
    names = ("model", "bayes", "oracle", "unigram", "bigram")
    return {
        "num_rows": figure1["num_rows"],
        "test_length": test_length,
        "early_tokens": early,
        "headline": headline,
        "by_num_demos": [
            {"demos": m, **{name: by[name]["accuracy"][i] for name in names}} for i, m in enumerate(counts)
        ],
        "accuracy": {name: by[name]["accuracy"][full] for name in ("model", "bayes", "oracle")},
        "accuracy_no_demos": {name: by[name]["accuracy"][none] for name in ("model", "bayes", "oracle")},
        "model_vs_bayes": versus,
    }


def summarize_probes(results: dict) -> dict:
    """Per-layer probe accuracies, chance and ceilings, and the shuffle test, from `probe_results.json`."""
    records = results["records"]
    distances = results["settings"]["distances"]
    targets = probe_targets(distances)
    columns = ["hidden state (within task)", "task", *(f"token {d} back" for d in distances)]
    chance, ceiling = chance_and_ceiling_cells(records, targets)
    return {
        "num_probe_rows": results["num_probe_rows"]["test"],
        "num_probe_tasks": len(results["probe_tasks"]),
        "columns": columns,
        "layers": [
            {"layer": layer, "cells": table_cells(records, targets, layer)} for layer in results["layers"]
        ],
        "chance": chance,
        "ceiling": ceiling,
        "shuffle": [
            {key: record[key] for key in ("layer", "value", "ci_low", "ci_high")}
            for record in records
            if record["target"] == "shuffle" and record["head"] is None
        ],
        "task_bayes_accuracy": find(records, "task", "bayes_optimal_accuracy")["value"],
        "hidden_state_oracle_accuracy": find(records, "hidden_state", "oracle_accuracy")["value"],
        "patterns": results["patterns"],
    }


def paper_claims(figure1: dict | None, probes: dict | None) -> list[dict]:
    """Each claim of the paper with whether this model shows it and the numbers that say so.

    `figure1` is a `figure1.json`, `probes` the output of `summarize_probes`.
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
            }
        )
    if probes is not None:
        fig2, fig3a, fig3b = (probes["patterns"][key] for key in ("figure2", "figure3a", "figure3b"))
        low, high = fig2["upper_minus_lower_ci"]
        claims.append(
            {
                "figure": "2",
                "claim": "upper layers' attention changes less when demonstrations are shuffled",
                "holds": fig2["upper_layers_change_less"],
                "measured": f"upper − lower layers {fig2['upper_minus_lower']:+.3f} (95% CI [{low:+.3f}, {high:+.3f}])",
            }
        )
        claims.append(
            {
                "figure": "3(a)",
                "claim": "task identity becomes decodable in upper layers",
                "holds": fig3a["task_rises_across_layers"],
                "measured": f"task probe {fig3a['task_first_layer_accuracy']:.3f} → {fig3a['task_last_layer_accuracy']:.3f} "
                f"(Bayes-optimal posterior {probes['task_bayes_accuracy']:.3f})",
            }
        )
        claims.append(
            {
                "figure": "3(a)",
                "claim": "the hidden state is decodable before the task",
                "holds": fig3a["hidden_state_before_task"],
                "measured": f"{fig3a['fraction']:.0%} of best reached: hidden state at layer {fig3a['hidden_state_layer']}, "
                f"task at layer {fig3a['task_layer']} (oracle filter {probes['hidden_state_oracle_accuracy']:.3f})",
            }
        )
        peaks = fig3b["by_distance"]
        peak_text = ", ".join(
            f"k={d}: {v['peak_accuracy']:.3f} at layer {v['peak_layer']}" for d, v in peaks.items()
        )
        claims += [
            {
                "figure": "3(b)",
                "claim": "previous tokens are decoded less well the further back they are",
                "holds": fig3b["accuracy_falls_with_distance"],
                "measured": f"peaks {peak_text}",
            },
            {
                "figure": "3(b)",
                "claim": "previous-token accuracy rises, then falls in upper layers",
                "holds": fig3b["all_rise_then_fall"],
                "measured": ", ".join(
                    f"k={d}: {'yes' if v['rises_then_falls'] else 'no'}" for d, v in peaks.items()
                ),
            },
            {
                "figure": "3(b)",
                "claim": "the peak layer moves up with the distance",
                "holds": fig3b["peak_layer_moves_up"],
                "measured": ", ".join(f"k={d}: layer {v['peak_layer']}" for d, v in peaks.items()),
            },
        ]
    for claim in claims:
        claim["holds"] = bool(claim["holds"])
    return claims


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
        "corpus": "hmm_mixture_config.json",
        "training": "train_results.json",
        "figure1": FIGURE1_JSON,
        "probes": PROBES_JSON,
    }
    raw = {name: _read_json(folder / path) for name, path in optional.items()}
    summary["corpus"] = raw["corpus"]
    summary["training"] = raw["training"]
    run_config = folder / "training_config.yaml"
    summary["run_config"] = yaml.safe_load(run_config.read_text()) if run_config.is_file() else None
    summary["in_context"] = summarize_figure1(raw["figure1"]) if raw["figure1"] else None
    summary["probes"] = summarize_probes(raw["probes"]) if raw["probes"] else None
    summary["claims"] = paper_claims(raw["figure1"], summary["probes"])
    summary["figure7"] = sorted(str(p.relative_to(folder)) for p in folder.glob("probes/figure7_*.png"))
    return summary


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


# ---- markdown ------------------------------------------------------------------------------
def render_results_section(summary: dict) -> str:
    """The results section (`results.md`) of a summary; empty when nothing was evaluated."""
    if summary["in_context"] is None:
        return ""
    template = jinja2.Template(RESULTS_TEMPLATE.read_text(), trim_blocks=False)
    figures = {**FIGURES, "figure7": summary["figure7"]}
    return template.render(
        in_context=summary["in_context"], probes=summary["probes"], claims=summary["claims"], figures=figures
    )


def model_index_results(summary: dict, dataset_type: str, dataset_name: str) -> list[EvalResult]:
    """The measured in-context results as `model-index` entries (test split, all demonstrations)."""
    in_context = summary["in_context"]
    if in_context is None:
        return []
    demos = in_context["by_num_demos"][-1]["demos"]
    values = [
        ("accuracy", f"Top-1 accuracy, {demos} demonstrations", in_context["accuracy"]["model"]),
        ("accuracy", "Top-1 accuracy, no demonstrations", in_context["accuracy_no_demos"]["model"]),
        (
            "agreement",
            "Argmax agreement with the Bayes-optimal predictor",
            in_context["model_vs_bayes"]["agreement"],
        ),
        (
            "kl_divergence",
            "KL(Bayes-optimal || model), nats/token",
            in_context["model_vs_bayes"]["kl_bayes_model"],
        ),
    ]
    return [
        EvalResult(
            task_type="text-generation",
            task_name="In-context next-token prediction",
            dataset_type=dataset_type,
            dataset_name=dataset_name,
            dataset_split="test",
            metric_type=metric_type,
            metric_name=name,
            metric_value=round(float(value), 4),
        )
        for metric_type, name, value in values
    ]


def render_model_card(
    folder: str | os.PathLike,
    repo_id: str | None = None,
    dataset_repo_id: str | None = None,
    location: str | None = None,
) -> ModelCard:
    """The model card of a model folder.

    Its snippets load `repo_id` when given, else `location` (default: the folder itself);
    `dataset_repo_id` names the corpus on the Hub in the metadata and the commands.
    """
    folder = Path(folder)
    summary = summarize_model_folder(folder)
    corpus = summary["corpus"] or {}
    corpus_name = corpus.get("name", "unknown corpus")
    model = summary["model"]
    name = f"HMMRoFormer {model['num_hidden_layers']} layers, hidden {model['hidden_size']}, on hmm_mixture {corpus_name}"
    card_data = ModelCardData(
        model_name=name,
        library_name="transformers",
        license="apache-2.0",
        pipeline_tag="text-generation",
        tags=["hmm-roformer", "roformer", "hidden-markov-model", "in-context-learning", "arxiv:2506.01919"],
        datasets=[dataset_repo_id] if dataset_repo_id else None,
        eval_results=model_index_results(
            summary, dataset_repo_id or "hmm_mixture", f"hmm_mixture {corpus_name}"
        )
        or None,
    )
    location = repo_id or location or str(folder)
    return ModelCard.from_template(
        card_data,
        template_path=str(MODEL_CARD_TEMPLATE),
        marker=MODEL_CARD_MARKER,
        title=name,
        location=location,
        summary=summary,
        results_section=render_results_section(summary),
        corpus=corpus,
        corpus_json=json.dumps(corpus, indent=2, sort_keys=True) if corpus else None,
        data_argument=dataset_repo_id or (corpus_name if corpus else "<corpus>"),
        dataset_repo_id=dataset_repo_id,
        run_config_yaml=yaml.safe_dump(summary["run_config"], sort_keys=False)
        if summary["run_config"]
        else None,
        training_line=training_line(summary),
        on_hub=repo_id is not None,
        citation=CITATION,
    )


def training_line(summary: dict) -> str | None:
    """One sentence on how long and on what the model was trained."""
    training, run = summary["training"], summary["run_config"]
    if not training or not run:
        return None
    arguments = run["training"]
    precision = "bf16" if arguments.get("bf16") else "fp16" if arguments.get("fp16") else "fp32"
    return (
        f"{arguments.get('max_steps')} steps of {arguments.get('per_device_train_batch_size')} rows per device "
        f"({training.get('train_tokens', 0):,} token positions) in {training.get('train_runtime', 0):.0f} s, "
        f"{precision}, learning rate {arguments.get('learning_rate')} ({arguments.get('lr_scheduler_type')}); "
        f"mean training loss {training.get('train_loss', float('nan')):.3f} nats/token."
    )


def write_model_card(folder: str | os.PathLike, location: str | None = None) -> Path:
    """Render the card of a model folder into its README.md (`location`: what its snippets load)."""
    path = Path(folder) / "README.md"
    render_model_card(folder, location=location).save(path)
    return path


def render_report(
    summary: dict, *, preset: str, stage_seconds: dict, machine: dict, files: dict, files_root: str
) -> str:
    """`REPORT.md` of a reproduction: the results section, timings and what lies where.

    `files` maps paths inside the reproduction folder to what they hold; `files_root` is that
    folder as the user typed it (for the commands shown).
    """
    template = jinja2.Template(REPORT_TEMPLATE.read_text())
    return template.render(
        preset=preset,
        summary=summary,
        results_section=render_results_section(summary),
        training_line=training_line(summary),
        files_root=files_root,
        stage_seconds=stage_seconds,
        total_seconds=sum(stage_seconds.values()),
        machine=machine,
        files=files,
        citation=CITATION,
    )
