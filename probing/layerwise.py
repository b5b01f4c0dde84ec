"""Probes for every layer and target, as JSON records, and the paper's patterns as numbers.

A record is `{"target", "layer", "metric", "value", "ci_low", "ci_high"}` with `layer` the
hidden-state index (0 = embeddings, i = output of layer i) or None for a layer-free
reference (chance; the Bayes-optimal or oracle ceiling).
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from .probes import (
    ProbeSettings,
    bootstrap_accuracies,
    control_labels,
    interval,
    majority_hits,
    per_row_counts,
    probe_hits,
)

SCORES = ("probe", "control", "chance", "control_chance")


def target_counts(
    features: torch.Tensor,
    labels: np.ndarray,
    tokens: np.ndarray,
    row_groups: np.ndarray,
    split: tuple[np.ndarray, np.ndarray],
    num_types: int,
    settings: ProbeSettings,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row correct answers and scored positions `[R, 4]` (`SCORES`) of one
    layer `features [R, P, D]` for one target `labels [R, P]` (-1: not scored).

    Rows of each group (all rows, or one task each for the within-task hidden-state probe)
    get their own probe and control task.
    """
    train_rows, test_rows = split
    num_rows = labels.shape[0]
    hits = {name: [] for name in SCORES}
    scored_rows = []
    for group in np.unique(row_groups):
        train = train_rows[row_groups[train_rows] == group]
        test = test_rows[row_groups[test_rows] == group]
        train_mask, test_mask = labels[train] >= 0, labels[test] >= 0
        x_train = features[train][torch.as_tensor(train_mask)]
        x_test = features[test][torch.as_tensor(test_mask)]
        y_train, y_test = labels[train][train_mask], labels[test][test_mask]
        types_train, types_test = tokens[train][train_mask], tokens[test][test_mask]
        control = control_labels(types_train, y_train, num_types, seed + int(group))
        hits["probe"].append(probe_hits(x_train, y_train, x_test, y_test, settings))
        hits["control"].append(
            probe_hits(x_train, control[types_train], x_test, control[types_test], settings)
        )
        hits["chance"].append(majority_hits(y_train, y_test))
        hits["control_chance"].append(majority_hits(control[types_train], control[types_test]))
        scored_rows.append(np.broadcast_to(test[:, None], test_mask.shape)[test_mask])
    rows = np.concatenate(scored_rows)
    counts = [per_row_counts(np.concatenate(hits[name]), rows, num_rows) for name in SCORES]
    correct = np.stack([c for c, _ in counts], axis=1)
    total = np.stack([t for _, t in counts], axis=1)
    return correct[test_rows], total[test_rows]


def accuracy_records(
    target: str, layer: int, correct: np.ndarray, total: np.ndarray, num_resamples: int, seed: int
) -> list[dict]:
    """accuracy, control_accuracy and selectivity records of one (target, layer).

    Selectivity is the accuracy above chance minus the control accuracy above the control
    task's chance (its majority label can be more frequent than the target's), so it is 0
    on activations that carry neither.
    """
    samples = bootstrap_accuracies(correct, total, num_resamples, seed)
    point = correct.sum(0) / np.maximum(total.sum(0), 1.0)

    def selectivity(accuracies):
        return (accuracies[..., 0] - accuracies[..., 2]) - (accuracies[..., 1] - accuracies[..., 3])

    values = {
        "accuracy": (point[0], samples[:, 0]),
        "control_accuracy": (point[1], samples[:, 1]),
        "selectivity": (selectivity(point), selectivity(samples)),
    }
    return [record(target, layer, metric, value, draws) for metric, (value, draws) in values.items()]


def record(
    target: str, layer, metric: str, value: float, draws: np.ndarray | None = None, head: int | None = None
) -> dict:
    """One JSON record; `head` is set only for per-head results (the shuffle test)."""
    low, high = interval(draws) if draws is not None else (None, None)
    return {
        "target": target,
        "layer": layer,
        "head": head,
        "metric": metric,
        "value": float(value),
        "ci_low": low,
        "ci_high": high,
    }


def layerwise_probes(
    features: torch.Tensor,
    layers: list[int],
    labels: dict[str, np.ndarray],
    targets: list[str],
    row_groups: dict[str, np.ndarray],
    split: tuple[np.ndarray, np.ndarray],
    *,
    num_types: int,
    settings: ProbeSettings,
    num_resamples: int = 1000,
    seed: int = 0,
    progress: bool = True,
) -> list[dict]:
    """Records for every (target, layer) of `features [layers, R, P, D]`; `labels[target]` is
    `[R, P]` at the captured positions and `labels["token"]` the token types there."""
    records = []
    work = [(target, index) for target in targets for index in range(len(layers))]
    for target, index in tqdm(work, desc="probes", disable=not progress):
        correct, total = target_counts(
            features[index],
            labels[target],
            labels["token"],
            row_groups[target],
            split,
            num_types,
            settings,
            seed,
        )
        records += accuracy_records(target, layers[index], correct, total, num_resamples, seed)
        if index == 0:  # the majority-label baselines do not depend on the layer
            samples = bootstrap_accuracies(correct[:, 2:], total[:, 2:], num_resamples, seed)
            point = correct[:, 2:].sum(0) / total[:, 2:].sum(0)
            records.append(record(target, None, "chance", point[0], samples[:, 0]))
            records.append(record(target, None, "control_chance", point[1], samples[:, 1]))
    return records


def reference_record(
    target: str, metric: str, hits: np.ndarray, rows: np.ndarray, num_resamples: int, seed: int
):
    """A layer-free accuracy (a ceiling) from per-position hits and their rows."""
    correct, total = per_row_counts(hits, rows, int(rows.max()) + 1)
    keep = total > 0
    samples = bootstrap_accuracies(correct[keep, None], total[keep, None], num_resamples, seed)[:, 0]
    return record(target, None, metric, correct.sum() / total.sum(), samples)


# ---- reading records back -------------------------------------------------------------
def curve(records: list[dict], target: str, metric: str = "accuracy") -> dict[str, np.ndarray]:
    """`layer`, `value`, `ci_low`, `ci_high` arrays of one target's per-layer metric."""
    rows = sorted(
        (
            r
            for r in records
            if r["target"] == target
            and r["metric"] == metric
            and r["layer"] is not None
            and r["head"] is None
        ),
        key=lambda r: r["layer"],
    )
    return {
        key: np.array([r[key] for r in rows], dtype=float) for key in ("layer", "value", "ci_low", "ci_high")
    }


def probe_targets(distances) -> list[str]:
    """The probed targets in table order: hidden state, task, the token k back for each distance."""
    return ["hidden_state", "task", *(f"previous_token_{d}" for d in distances)]


CEILINGS = {"hidden_state": "oracle_accuracy", "task": "bayes_optimal_accuracy"}  # previous tokens: 1


def table_cells(records: list[dict], targets: list[str], layer: int) -> list[str]:
    """One table row: "accuracy [selectivity]" of each target at `layer`."""
    return [
        f"{find(records, t, 'accuracy', layer)['value']:.3f} [{find(records, t, 'selectivity', layer)['value']:+.2f}]"
        for t in targets
    ]


def chance_and_ceiling_cells(records: list[dict], targets: list[str]) -> tuple[list[str], list[str]]:
    """The chance row and the ceiling row (oracle filter, Bayes-optimal task posterior, 1)."""
    chance = [f"{find(records, t, 'chance')['value']:.3f}" for t in targets]
    ceiling = [f"{find(records, t, CEILINGS[t])['value']:.3f}" if t in CEILINGS else "1" for t in targets]
    return chance, ceiling


def find(records: list[dict], target: str, metric: str, layer=None, head=None) -> dict | None:
    """The record of (target, metric, layer, head), None if there is none."""
    for r in records:
        if (r["target"], r["metric"], r["layer"], r["head"]) == (target, metric, layer, head):
            return r
    return None


# ---- the paper's patterns ---------------------------------------------------------------
def previous_token_patterns(records: list[dict], distances: list[int]) -> dict:
    """Figure 3(b): accuracy falls with distance; each curve rises then falls; the peak
    layer moves up with distance.

    A curve "rises then falls" when its peak is at an inner layer and the peak's interval
    lies above the intervals at both the first and the last layer.
    """
    per_distance = {}
    for distance in distances:
        c = curve(records, f"previous_token_{distance}")
        peak = int(np.argmax(c["value"]))
        rises = c["ci_low"][peak] > c["ci_high"][0]
        falls = c["ci_low"][peak] > c["ci_high"][-1]
        per_distance[str(distance)] = {
            "peak_layer": int(c["layer"][peak]),
            "peak_accuracy": float(c["value"][peak]),
            "first_layer_accuracy": float(c["value"][0]),
            "last_layer_accuracy": float(c["value"][-1]),
            "rises_then_falls": bool(0 < peak < len(c["value"]) - 1 and rises and falls),
        }
    peaks = [per_distance[str(d)]["peak_accuracy"] for d in distances]
    peak_layers = [per_distance[str(d)]["peak_layer"] for d in distances]
    return {
        "by_distance": per_distance,
        "accuracy_falls_with_distance": bool(all(a > b for a, b in zip(peaks, peaks[1:]))),
        "all_rise_then_fall": bool(all(v["rises_then_falls"] for v in per_distance.values())),
        "peak_layer_moves_up": bool(
            all(a <= b for a, b in zip(peak_layers, peak_layers[1:])) and peak_layers[-1] > peak_layers[0]
        ),
    }


def first_layer_reaching(records: list[dict], target: str, fraction: float) -> int:
    """The first layer whose accuracy above chance reaches `fraction` of the best layer's."""
    c = curve(records, target)
    chance = find(records, target, "chance")["value"]
    above = c["value"] - chance
    return int(c["layer"][np.argmax(above >= fraction * above.max())])


def hidden_state_and_task_patterns(records: list[dict], fraction: float) -> dict:
    """Figure 3(a): the hidden state is identified at a lower layer than the task; task
    identity rises across layers (its last layer's interval above its first layer's)."""
    task = curve(records, "task")
    hidden_layer = first_layer_reaching(records, "hidden_state", fraction)
    task_layer = first_layer_reaching(records, "task", fraction)
    return {
        "fraction": fraction,
        "hidden_state_layer": hidden_layer,
        "task_layer": task_layer,
        "hidden_state_before_task": bool(hidden_layer < task_layer),
        "task_first_layer_accuracy": float(task["value"][0]),
        "task_last_layer_accuracy": float(task["value"][-1]),
        "task_rises_across_layers": bool(task["ci_low"][-1] > task["ci_high"][0]),
    }
