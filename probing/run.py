"""The whole layerwise analysis of one checkpoint on one corpus (what `scripts/probe.py` runs).

Probe rows: `rows_per_task` fresh rows of each of the first `num_probe_tasks` tasks, drawn
from the corpus's own HMMs with its sampler (a task-identity probe needs several rows of
each task it names; a test split of the `paper` corpus has fewer rows than tasks). Rows of
every task are split into probe-train and probe-test. The shuffle test and the attention
maps read the corpus's test split.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch

import hmm_datasets
from hmm_datasets import SampleLayout
from hmm_datasets.bayes import oracle_state_estimates
from hmm_datasets.corpus import Corpus, check_model_fits_corpus

from .capture import (
    attention_weights,
    capture_hidden_states,
    check_hmm_roformer,
    model_device,
    resolve_layers,
)
from .labels import (
    check_distance,
    position_labels,
    probe_tasks,
    sample_positions,
    sample_probe_rows,
    split_rows,
)
from .layerwise import (
    chance_and_ceiling_cells,
    find,
    hidden_state_and_task_patterns,
    layerwise_probes,
    previous_token_patterns,
    probe_targets,
    record,
    reference_record,
    table_cells,
)
from .probes import ProbeSettings, bootstrap_accuracies, interval
from .shuffle import shuffle_test


@dataclass
class ProbeConfig:
    """Every setting of a probing run (validated; see the README's Probing section)."""

    num_probe_tasks: int = 16
    rows_per_task: int = 64
    positions_per_row: int | None = 48
    distances: tuple[int, ...] = (1, 2, 3, 4, 5)
    layers: tuple[int, ...] | None = None
    probe_train_fraction: float = 0.5
    l2: float = 1e-3
    max_iter: int = 100
    num_resamples: int = 1000
    reach_fraction: float = 0.9
    shuffle_rows: int = 256
    attention_rows: tuple[int, ...] = (0,)
    dtype: str = "float16"
    batch_size: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        self.distances = tuple(int(d) for d in self.distances)
        self.attention_rows = tuple(int(r) for r in self.attention_rows)
        if self.layers is not None:
            self.layers = tuple(int(layer) for layer in self.layers)
        for name in (
            "num_probe_tasks",
            "rows_per_task",
            "max_iter",
            "num_resamples",
            "shuffle_rows",
            "batch_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer.")
        if self.positions_per_row is not None and self.positions_per_row < 1:
            raise ValueError(
                f"positions_per_row={self.positions_per_row} must be positive (or None for all)."
            )
        if not 0 < self.probe_train_fraction < 1:
            raise ValueError(
                f"probe_train_fraction={self.probe_train_fraction} must lie strictly between 0 and 1."
            )
        if not 0 < self.reach_fraction <= 1:
            raise ValueError(f"reach_fraction={self.reach_fraction} must lie in (0, 1].")
        if self.l2 < 0:
            raise ValueError(f"l2={self.l2} must be >= 0.")
        if not self.distances:
            raise ValueError("distances is empty: give at least one previous-token distance.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class ProbeResult:
    """The JSON-ready results and the attention weights of the chosen rows (for Figure 7)."""

    results: dict
    attention: np.ndarray  # [layers, rows, heads, L, L]
    layout: SampleLayout


def run_probing(model, corpus: Corpus, config: ProbeConfig, *, progress: bool = True) -> ProbeResult:
    """Figures 2, 3(a), 3(b) and 7 of the paper for `model` on `corpus` (module docstring)."""
    check_hmm_roformer(model)
    check_model_fits_corpus(model.config, corpus.config)
    layout = corpus.layout
    for distance in config.distances:
        check_distance(distance, layout)
    layers = resolve_layers(model, config.layers)
    test_split = corpus.splits["test"]
    _check_rows(config, len(test_split))
    device = str(model_device(model))
    timings, started = {}, time.perf_counter()

    tasks = probe_tasks(corpus.params, config.num_probe_tasks)
    rows = sample_probe_rows(corpus.config, corpus.params, tasks, config.rows_per_task, config.seed)
    labels = position_labels(rows, layout, config.distances)
    positions = sample_positions(layout, len(rows["task_id"]), config.positions_per_row, config.seed)
    at_positions = {name: np.take_along_axis(np.asarray(v), positions, axis=1) for name, v in labels.items()}
    split = split_rows(rows["task_id"], config.probe_train_fraction, config.seed)
    features = capture_hidden_states(
        model,
        rows["input_ids"],
        positions,
        layers=layers,
        dtype=config.dtype,
        batch_size=config.batch_size,
        progress=progress,
    )
    timings["capture"] = time.perf_counter() - started

    started = time.perf_counter()
    targets = probe_targets(config.distances)
    row_task = np.asarray(rows["task_id"]).astype(np.int64)
    groups = {target: np.zeros_like(row_task) for target in targets}
    groups["hidden_state"] = row_task  # one probe per task: states of different HMMs share nothing
    settings = ProbeSettings(config.l2, config.max_iter, device)
    records = layerwise_probes(
        features,
        layers,
        at_positions,
        targets,
        groups,
        split,
        num_types=corpus.config.vocab_size + 1,
        settings=settings,
        num_resamples=config.num_resamples,
        seed=config.seed,
        progress=progress,
    )
    records += ceiling_records(corpus, rows, positions, at_positions, tasks, split[1], config)
    timings["probes"] = time.perf_counter() - started

    started = time.perf_counter()
    test_ids = np.stack(test_split.select(range(config.shuffle_rows)).with_format("numpy")["input_ids"])
    changes = shuffle_test(
        model,
        test_ids,
        layout,
        seed=config.seed,
        batch_size=max(1, config.batch_size // 4),
        progress=progress,
    )
    records += shuffle_records(changes, config.num_resamples, config.seed)
    timings["shuffle_test"] = time.perf_counter() - started

    started = time.perf_counter()
    attention = attention_weights(model, test_ids[list(config.attention_rows)]).numpy()
    timings["attention_maps"] = time.perf_counter() - started

    results = {
        "corpus": corpus.source,
        "layout": dataclasses.asdict(layout),
        "model": {
            "num_hidden_layers": model.config.num_hidden_layers,
            "num_attention_heads": model.config.num_attention_heads,
            "hidden_size": model.config.hidden_size,
        },
        "device": device,
        "settings": config.to_dict(),
        "layers": layers,
        "probe_tasks": tasks.tolist(),
        "num_probe_rows": {"train": int(split[0].size), "test": int(split[1].size)},
        "num_shuffle_rows": int(test_ids.shape[0]),
        "records": records,
        "patterns": {
            "figure2": shuffle_patterns(changes, config.num_resamples, config.seed),
            "figure3a": hidden_state_and_task_patterns(records, config.reach_fraction),
            "figure3b": previous_token_patterns(records, list(config.distances)),
        },
        "timings_s": timings,
    }
    return ProbeResult(results, attention, layout)


def _check_rows(config: ProbeConfig, num_test_rows: int) -> None:
    if config.shuffle_rows > num_test_rows:
        raise ValueError(
            f"shuffle_rows={config.shuffle_rows} but the corpus's test split has {num_test_rows} rows: "
            f"use shuffle_rows <= {num_test_rows}."
        )
    bad = [row for row in config.attention_rows if not 0 <= row < config.shuffle_rows]
    if bad:
        raise ValueError(
            f"attention_rows {bad} must index the first shuffle_rows={config.shuffle_rows} test rows."
        )


def ceiling_records(corpus, rows, positions, at_positions, tasks, test_rows, config) -> list[dict]:
    """What the best decoder could reach on the probe-test positions: the Bayes-optimal task
    posterior (argmax over the probed tasks) and the oracle's filtered hidden state."""
    ids, row_task = np.asarray(rows["input_ids"])[test_rows], np.asarray(rows["task_id"])[test_rows]
    where = positions[test_rows]
    bayes = hmm_datasets.BayesOptimalPredictor(corpus.params)
    guesses = []
    for chunk in np.array_split(np.arange(ids.shape[0]), max(1, ids.shape[0] // 16)):
        posterior = bayes.task_posterior(ids[chunk])[..., torch.as_tensor(tasks, device=bayes.device)]
        guesses.append(tasks[posterior.argmax(-1).cpu().numpy()])
    task_guess = np.take_along_axis(np.concatenate(guesses), where, axis=1)
    state_guess = np.take_along_axis(oracle_state_estimates(corpus.params, ids, row_task), where, axis=1)
    out = []
    for target, metric, guess in (
        ("task", "bayes_optimal_accuracy", task_guess),
        ("hidden_state", "oracle_accuracy", state_guess),
    ):
        truth = at_positions[target][test_rows]
        scored = truth >= 0
        row_of = np.broadcast_to(np.arange(truth.shape[0])[:, None], truth.shape)[scored]
        hits = guess[scored] == truth[scored]
        out.append(reference_record(target, metric, hits, row_of, config.num_resamples, config.seed))
    return out


def shuffle_records(changes: np.ndarray, num_resamples: int, seed: int) -> list[dict]:
    """Per layer (mean over heads) and per (layer, head): mean relative change over rows with
    a bootstrap interval. Layers are numbered 1..num_hidden_layers (the attention of layer i)."""
    num_rows, num_layers, num_heads = changes.shape
    # One bootstrap for every column: [rows, layers * (1 + heads)], layer means first.
    columns = np.concatenate([changes.mean(-1), changes.reshape(num_rows, -1)], axis=1)
    draws = bootstrap_means(columns, num_resamples, seed)
    means = columns.mean(0)
    out = []
    for layer in range(num_layers):
        out.append(record("shuffle", layer + 1, "relative_logit_change", means[layer], draws[:, layer]))
        for head in range(num_heads):
            column = num_layers + layer * num_heads + head
            out.append(
                record(
                    "shuffle", layer + 1, "relative_logit_change", means[column], draws[:, column], head=head
                )
            )
    return out


def bootstrap_means(values: np.ndarray, num_resamples: int, seed: int) -> np.ndarray:
    """`[num_resamples, M]`: column means of `values [rows, M]` on row resamples."""
    return bootstrap_accuracies(values, np.ones_like(values), num_resamples, seed)


def shuffle_patterns(changes: np.ndarray, num_resamples: int, seed: int) -> dict:
    """Figure 2: do the upper half of the layers change less than the lower half?"""
    per_layer = changes.mean(-1)  # [rows, layers]
    half = per_layer.shape[1] // 2
    difference = per_layer[:, half:].mean(1) - per_layer[:, :half].mean(1)
    low, high = interval(bootstrap_means(difference[:, None], num_resamples, seed)[:, 0])
    mean = per_layer.mean(0)
    return {
        "lower_layers": list(range(1, half + 1)),
        "upper_layers": list(range(half + 1, per_layer.shape[1] + 1)),
        "upper_minus_lower": float(difference.mean()),
        "upper_minus_lower_ci": [low, high],
        "upper_layers_change_less": bool(high < 0),
        "layer_of_largest_change": int(np.argmax(mean)) + 1,
        "layer_of_smallest_change": int(np.argmin(mean)) + 1,
    }


def summarize_probe_results(results: dict) -> dict:
    """Per-layer probe accuracies, chance and ceilings, and the shuffle test of `probe_results.json`,
    as the cards show them (`model_cards.render`)."""
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


def format_summary(results: dict) -> str:
    """The per-layer tables and the patterns, as plain text."""
    records = results["records"]
    distances = results["settings"]["distances"]
    targets = probe_targets(distances)
    names = ["state", "task", *(f"prev {d}" for d in distances)]
    lines = [
        f"Probe accuracy on probe-test positions ({results['num_probe_rows']['test']} rows); in brackets the "
        "selectivity: accuracy above chance minus the control task's",
        f"{'layer':>6}  " + "  ".join(f"{name:>15}" for name in names),
    ]
    for layer in results["layers"]:
        cells = table_cells(records, targets, layer)
        lines.append(f"{layer:>6}  " + "  ".join(f"{cell:>15}" for cell in cells))
    chance, ceiling = chance_and_ceiling_cells(records, targets)
    lines.append(f"{'chance':>6}  " + "  ".join(f"{cell:>15}" for cell in chance))
    lines.append(f"{'best':>6}  " + "  ".join(f"{cell:>15}" for cell in ceiling))
    lines.append("(best: oracle filter for the hidden state, Bayes-optimal task posterior for the task)")

    shuffle = [
        find(records, "shuffle", "relative_logit_change", layer) for layer in _attention_layers(results)
    ]
    lines += [
        "",
        "Shuffle test: relative change of test-query -> demonstration attention logits, per layer",
        "  "
        + "  ".join(
            f"L{r['layer']}: {r['value']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" for r in shuffle
        ),
    ]
    figure2, figure3a, figure3b = (results["patterns"][key] for key in ("figure2", "figure3a", "figure3b"))
    peaks = ", ".join(
        f"k={d}: layer {v['peak_layer']} ({v['peak_accuracy']:.3f}{', rises then falls' if v['rises_then_falls'] else ''})"
        for d, v in figure3b["by_distance"].items()
    )
    lines += [
        "",
        "Patterns of the paper, as measured:",
        f"  Fig 2  upper layers {figure2['upper_layers']} change less than lower {figure2['lower_layers']}: "
        f"{_yes(figure2['upper_layers_change_less'])} (difference {figure2['upper_minus_lower']:+.3f}, "
        f"95% CI [{figure2['upper_minus_lower_ci'][0]:+.3f}, {figure2['upper_minus_lower_ci'][1]:+.3f}])",
        f"  Fig 3a hidden state reaches {figure3a['fraction']:.0%} of its best above chance at layer "
        f"{figure3a['hidden_state_layer']}, the task at layer {figure3a['task_layer']}: hidden state first: "
        f"{_yes(figure3a['hidden_state_before_task'])}; task rises across layers "
        f"({figure3a['task_first_layer_accuracy']:.3f} -> {figure3a['task_last_layer_accuracy']:.3f}): "
        f"{_yes(figure3a['task_rises_across_layers'])}",
        f"  Fig 3b accuracy falls with distance: {_yes(figure3b['accuracy_falls_with_distance'])}; every curve rises "
        f"then falls: {_yes(figure3b['all_rise_then_fall'])}; peak layer moves up: "
        f"{_yes(figure3b['peak_layer_moves_up'])}",
        f"         peaks: {peaks}",
    ]
    return "\n".join(lines)


def _attention_layers(results: dict) -> list[int]:
    return list(range(1, results["model"]["num_hidden_layers"] + 1))


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
