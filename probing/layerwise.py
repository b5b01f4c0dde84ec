"""Probes for every layer, target and position group, as JSON records, and the paper's
patterns as numbers with bootstrap intervals (curves and numbers, never verdicts).

Each number is a record (`probing.records.Record`, written as its JSON object) of a target, a
layer, a metric and the position group it is scored on (`POSITION_GROUPS`: all observation
positions, the first / second / later demonstrations, every demonstration, the test sequence).

Metrics of a target: `accuracy` (the linear probe; of the trained network, or of its
untrained twin of the same initialisation: the record's `network`), the floors
`token_baseline` (the majority label of the current token: of (task, token) for the
within-task hidden state; what a probe that only sees the token reaches) and `chance` (the
majority label), the ceilings `bayes_optimal_accuracy` (task) and `oracle_accuracy` (hidden
state), and `headroom_fraction` = (accuracy - token baseline) / (ceiling - token baseline):
0 for a probe that only knows the token, 1 at the ceiling. A pre-norm model's last layer is also probed before the final LayerNorm
(`accuracy_before_final_norm`, at layer num_hidden_layers).

Every bootstrap resamples the same probe-test rows (one seed, one row count), so draws of
different records are paired: the intervals of differences, first-reach layers and peak
layers below are computed draw by draw.
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from .probes import (
    FitSettings,
    bootstrap_accuracies,
    fit_probes,
    interval,
    majority_hits,
    token_majority_hits,
)
from .records import DECIDING_POSITIONS, Network, Record, RecordSet

SCORES = ("accuracy", "token_baseline", "chance")
CEILINGS = {"hidden_state": "oracle_accuracy", "task": "bayes_optimal_accuracy"}  # previous tokens: 1
REACH_FRACTIONS = tuple(round(f, 2) for f in np.arange(0.5, 0.951, 0.05))
BEFORE_NORM_METRIC = "accuracy_before_final_norm"


class Draws(dict):
    """`(target, metric, layer, positions) -> (value, bootstrap draws [num_resamples])`."""


# ---- probing ------------------------------------------------------------------------------
def probe_problems(
    targets: list[str], row_groups: dict[str, np.ndarray], split
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """One probe per (target, row group): `(target, its train rows, its test rows)`. Rows of
    each group (all rows, or one task each for the within-task hidden state) get their own probe."""
    train_rows, test_rows = split
    return [
        (
            target,
            train_rows[row_groups[target][train_rows] == group],
            test_rows[row_groups[target][test_rows] == group],
        )
        for target in targets
        for group in np.unique(row_groups[target])
    ]


def layer_accuracy_hits(
    features: torch.Tensor,
    labels: dict[str, np.ndarray],
    targets: list[str],
    row_groups: dict[str, np.ndarray],
    split: tuple[np.ndarray, np.ndarray],
    settings: FitSettings,
) -> dict[str, np.ndarray]:
    """`target -> [R_test, P]` int8 of one layer `features [R, P, D]`: 1 where the target's
    probe answers a probe-test position right, 0 where wrong, -1 where not scored.

    The probes of the layer are fitted in two batched solves (`fit_probes`): those on all
    probe-train rows read the same features, those of a row group (the within-task hidden
    state) their own, padded to one length. A test label never seen in training counts as
    wrong; a probe with no labelled train or test position scores nothing.
    """
    test_rows = split[1]
    out = {
        target: np.full((test_rows.size, labels[target].shape[1]), -1, dtype=np.int8) for target in targets
    }
    problems = [
        (target, train, test)
        for target, train, test in probe_problems(targets, row_groups, split)
        if (labels[target][train] >= 0).any() and (labels[target][test] >= 0).any()
    ]
    on_all_rows = [train.size == split[0].size for _, train, _ in problems]
    flat = features.to(settings.device).float()  # [R, P, D]
    for shared in (True, False):
        batch = [problem for problem, all_rows in zip(problems, on_all_rows) if all_rows == shared]
        if not batch:
            continue
        for (target, _, test), answer in zip(batch, fit_and_answer(flat, labels, batch, shared, settings)):
            truth = labels[target][test]
            out[target][np.searchsorted(test_rows, test)] = np.where(truth >= 0, answer == truth, -1)
    return out


def padded(features: torch.Tensor, rows: list[np.ndarray]) -> torch.Tensor:
    """`[B, N, D]`: the positions of each problem's rows of `features [R, P, D]`, one after
    the other, zero-padded to the longest problem."""
    out = features.new_zeros(len(rows), max(r.size for r in rows) * features.shape[1], features.shape[-1])
    for b, chosen in enumerate(rows):
        out[b, : chosen.size * features.shape[1]] = features[torch.as_tensor(chosen)].flatten(0, 1)
    return out


def fit_and_answer(features, labels, problems, shared: bool, settings) -> list[np.ndarray]:
    """The label each problem's probe answers on its test rows (`[rows, P]` each), the probes
    of `problems` fitted together: on shared features (every problem on all probe-train rows)
    or on each problem's own rows (`padded`, the padding unlabelled)."""
    classes, train_labels = [], []
    for target, train, _ in problems:
        y = labels[target][train].reshape(-1)
        found = np.unique(y[y >= 0])
        classes.append(found)
        train_labels.append(np.where(y >= 0, np.searchsorted(found, y), -1))
    y_train = np.full((len(problems), max(y.size for y in train_labels)), -1, dtype=np.int64)
    for b, y in enumerate(train_labels):
        y_train[b, : y.size] = y
    trains, tests = [train for _, train, _ in problems], [test for _, _, test in problems]
    if shared:
        x_train, x_test = (features[torch.as_tensor(rows[0])].flatten(0, 1) for rows in (trains, tests))
    else:
        x_train, x_test = padded(features, trains), padded(features, tests)
    device = features.device
    probes = fit_probes(
        x_train,
        torch.as_tensor(y_train, device=device),
        torch.as_tensor([c.size for c in classes], device=device),
        settings,
    )
    index = probes.predict(x_test).cpu().numpy()  # [B, N_test (padded)]
    width = features.shape[1]
    return [c[i[: test.size * width]].reshape(test.size, width) for c, i, test in zip(classes, index, tests)]


def baseline_hits(
    labels: np.ndarray, tokens: np.ndarray, problems: list[tuple[str, np.ndarray, np.ndarray]], test_rows
) -> np.ndarray:
    """`[2, R_test, P]` int8 of the layer-free scores `SCORES[1:]` (the current token's
    majority label, the overall majority) of one target, per probe of `probe_problems` (its
    rows), on the probe-test positions (1/0/-1 as above)."""
    out = np.full((2, test_rows.size, labels.shape[1]), -1, dtype=np.int8)
    for _, train, test in problems:
        train_mask, test_mask = labels[train] >= 0, labels[test] >= 0
        y_train, y_test = labels[train][train_mask], labels[test][test_mask]
        if y_train.size == 0 or y_test.size == 0:
            continue
        block = np.full((2, *test_mask.shape), -1, dtype=np.int8)
        block[0][test_mask] = token_majority_hits(
            tokens[train][train_mask], y_train, tokens[test][test_mask], y_test
        )
        block[1][test_mask] = majority_hits(y_train, y_test)
        out[:, np.searchsorted(test_rows, test)] = block
    return out


def group_counts(hits: np.ndarray, membership: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Correct answers and scored positions `[R, S, G]` of `hits [S, R, P]` (1/0/-1) in the
    position groups `membership [G, R, P]` (bool)."""
    member = membership.astype(np.float64)
    correct = np.einsum("srp,grp->rsg", (hits == 1).astype(np.float64), member)
    total = np.einsum("srp,grp->rsg", (hits >= 0).astype(np.float64), member)
    return correct, total


def counts_to_records(
    target: str,
    layer,
    metrics: tuple[str, ...],
    correct: np.ndarray,
    total: np.ndarray,
    groups: tuple[str, ...],
    num_resamples: int,
    seed: int,
    draws: Draws,
    network: Network = "trained",
) -> list[dict]:
    """Records of `metrics x groups` of `network` from counts `[R, S, G]`; their draws go to `draws`."""
    rows, num_scores, num_groups = correct.shape
    samples = bootstrap_accuracies(
        correct.reshape(rows, -1), total.reshape(rows, -1), num_resamples, seed
    ).reshape(-1, num_scores, num_groups)
    point = correct.sum(0) / np.maximum(total.sum(0), 1.0)
    out = []
    for s, metric in enumerate(metrics):
        for g, group in enumerate(groups):
            if total[:, s, g].sum() == 0:
                continue
            draws[(target, metric, layer, group)] = (float(point[s, g]), samples[:, s, g])
            out.append(
                record(target, layer, metric, point[s, g], samples[:, s, g], positions=group, network=network)
            )
    return out


def record(
    target: str,
    layer,
    metric: str,
    value: float | None,
    draws: np.ndarray | None = None,
    head: int | None = None,
    positions: str = "all",
    network: Network = "trained",
) -> dict:
    """One record as JSON (`Record.to_json`), its interval from `draws`; `head` is set only for
    per-head results (the shuffle test)."""
    finite = draws is not None and value is not None and np.isfinite(draws).any()
    low, high = interval(draws[np.isfinite(draws)]) if finite else (None, None)
    value = None if value is None else float(value)
    return Record(target, layer, head, metric, positions, network, value, low, high).to_json()


def layerwise_probes(
    features: torch.Tensor,
    layers: list[int],
    labels: dict[str, np.ndarray],
    targets: list[str],
    row_groups: dict[str, np.ndarray],
    split: tuple[np.ndarray, np.ndarray],
    *,
    settings: FitSettings,
    membership: np.ndarray | None = None,
    groups: tuple[str, ...] = ("all",),
    num_resamples: int = 1000,
    seed: int = 0,
    metric: str = "accuracy",
    network: Network = "trained",
    draws: Draws | None = None,
    progress: bool = True,
) -> tuple[list[dict], Draws]:
    """Records for every (target, layer, position group) of `features [layers, R, P, D]`;
    `labels[target]` is `[R, P]` at the captured positions and `labels["token"]` the tokens
    there; `membership [G, R, P]` says which positions belong to each of `groups` (default:
    one group, all). `metric` names the probe's accuracy (`accuracy`, or
    `accuracy_before_final_norm` for a last layer read before the final norm) and `network` the
    network `features` come from; the trained network's `accuracy` comes with the token baseline
    and chance (the floors, with the first layer)."""
    draws = Draws() if draws is None else draws
    if membership is None:
        membership = np.ones((1, *labels[targets[0]].shape), dtype=bool)
    test_membership = membership[:, split[1]]
    with_baselines = (metric, network) == ("accuracy", "trained")
    hits = {target: [] for target in targets}
    for index in tqdm(range(len(layers)), desc=f"probes ({network} {metric})", disable=not progress):
        found = layer_accuracy_hits(features[index], labels, targets, row_groups, split, settings)
        for target in targets:
            hits[target].append(found[target])
    records = []
    common = (groups, num_resamples, seed, draws)
    for target in targets:
        for index, layer in enumerate(layers):
            correct, total = group_counts(hits[target][index][None], test_membership)
            records += counts_to_records(target, layer, (metric,), correct, total, *common, network)
            if with_baselines and index == 0:  # the baselines do not depend on the layer
                problems = probe_problems([target], row_groups, split)
                scores = baseline_hits(labels[target], labels["token"], problems, split[1])
                correct, total = group_counts(scores, test_membership)
                records += counts_to_records(target, None, SCORES[1:], correct, total, *common, "floor")
    return records, draws


def accuracy_curves(
    features: torch.Tensor,
    labels: dict[str, np.ndarray],
    targets: list[str],
    split: tuple[np.ndarray, np.ndarray],
    halves: list[tuple[np.ndarray, np.ndarray]],
    settings: FitSettings,
    progress: bool = True,
) -> dict[str, dict[str, list]]:
    """`target -> {"all": [layers], "halves_apart": [[layers], [layers]]}` at every layer of
    `features [layers, R, P, D]`: the accuracy of each target's probe fitted on all probe-train
    rows and scored on all probe-test rows (`split`), and of the probes of each of `halves` (two
    `(train rows, test rows)`, `half_splits`), each fitted on its own probe-train half and scored
    on its own probe-test half: a curve's peak chosen on one half and read on the other shares
    neither the test rows nor the probe's fit.

    Per layer, the probes of `split` are fitted in one batched solve (as alone: "all" does not
    depend on the halves) and those of each half in one more, on features shared by its targets.
    """
    groups = {target: np.zeros(labels[target].shape[0], dtype=np.int64) for target in targets}
    out = {target: {"all": [], "halves_apart": [[], []]} for target in targets}
    for index in tqdm(range(features.shape[0]), desc="probe curves", disable=not progress):
        layer = features[index].to(settings.device).float()  # moved once for the three solves
        found = layer_accuracy_hits(layer, labels, targets, groups, split, settings)
        apart = [layer_accuracy_hits(layer, labels, targets, groups, half, settings) for half in halves]
        for target in targets:
            out[target]["all"].append(_accuracy(found[target]))
            for half, hits in enumerate(apart):
                out[target]["halves_apart"][half].append(_accuracy(hits[target]))
    return out


def _accuracy(hits: np.ndarray) -> float:
    """Share of correct answers among the scored positions of `hits` (1/0/-1); NaN if none."""
    scored = int((hits >= 0).sum())
    return float((hits == 1).sum() / scored) if scored else float("nan")


def headroom_records(draws: Draws, target: str, layers: list[int], groups: tuple[str, ...]) -> list[dict]:
    """`headroom_fraction` per (layer, group) of a target with a ceiling (`CEILINGS`):
    (accuracy - token baseline) / (ceiling - token baseline), draw by draw. None where the
    ceiling is within 0.01 of the token baseline (no headroom to measure)."""
    out = []
    for group in groups:
        base, ceiling = (
            draws.get((target, "token_baseline", None, group)),
            draws.get((target, CEILINGS[target], None, group)),
        )
        if base is None or ceiling is None:
            continue
        for layer in layers:
            accuracy = draws.get((target, "accuracy", layer, group))
            if accuracy is None:
                continue
            room = ceiling[0] - base[0]
            value = (accuracy[0] - base[0]) / room if room > 0.01 else None
            with np.errstate(divide="ignore", invalid="ignore"):
                samples = (accuracy[1] - base[1]) / (ceiling[1] - base[1])
            samples = np.where(np.isfinite(samples), samples, np.nan)
            draws[(target, "headroom_fraction", layer, group)] = (value, samples)
            out.append(record(target, layer, "headroom_fraction", value, samples, positions=group))
    return out


# ---- reading records back -------------------------------------------------------------
def probe_targets(distances) -> list[str]:
    """The probed targets in table order: hidden state, task, the token k back for each distance."""
    return ["hidden_state", "task", *(f"previous_token_{d}" for d in distances)]


def table_cells(records: RecordSet, targets: list[str], layer: int) -> list[dict]:
    """One table row: per target, the accuracy at `layer` and the fraction of the headroom it
    reaches (`headroom_fraction`: None for a target without a ceiling)."""
    cells = []
    for target in targets:
        fraction = records.find(target, "headroom_fraction", layer)
        cells.append(
            {
                "accuracy": records.find(target, "accuracy", layer).value,
                "headroom_fraction": None if fraction is None else fraction.value,
            }
        )
    return cells


def reference_cells(records: RecordSet, targets: list[str]) -> dict[str, list]:
    """The token-baseline, chance and ceiling rows (oracle filter, Bayes-optimal task posterior,
    and 1 exactly for a previous token), a value per target (None where none was recorded)."""

    def value(target: str, metric: str, network: Network) -> float | None:
        found = records.find(target, metric, network=network)
        return None if found is None else found.value

    return {
        "token_baseline": [value(t, "token_baseline", "floor") for t in targets],
        "chance": [value(t, "chance", "floor") for t in targets],
        "ceiling": [value(t, CEILINGS[t], "ceiling") if t in CEILINGS else 1 for t in targets],
    }


def _value_and_interval(record: Record | None) -> dict | None:
    return (
        None
        if record is None
        else {"value": record.value, "ci_low": record.ci_low, "ci_high": record.ci_high}
    )


# ---- the paper's patterns ---------------------------------------------------------------
def relative_depth(layers: list[int], num_layers: int) -> list[float]:
    """l / L of hidden-state indices l (0: the embeddings), to compare models of other depths."""
    return [layer / num_layers for layer in layers]


def stacked(draws: Draws, target: str, metric: str, layers: list[int], group: str):
    """`(values [layers], draws [num_resamples, layers])` of a per-layer metric, or None."""
    found = [draws.get((target, metric, layer, group)) for layer in layers]
    if any(f is None for f in found):
        return None
    values = np.array([np.nan if f[0] is None else f[0] for f in found], dtype=float)
    return values, np.stack([f[1] for f in found], axis=1)


def first_reach(values: np.ndarray, layers: list[int], fraction: float) -> float:
    """The first of `layers` whose value reaches `fraction` (values [..., layers]; one past
    the last layer where none does)."""
    reached = np.nan_to_num(values, nan=-np.inf) >= fraction
    never = layers[-1] + 1
    index = np.argmax(reached, axis=-1)
    return np.where(reached.any(-1), np.asarray(layers)[index], never)


def reach_curve(values: np.ndarray, samples: np.ndarray, layers: list[int], num_layers: int) -> dict:
    """The first layer at which a headroom-fraction curve reaches f, for f in REACH_FRACTIONS,
    in layers and relative depth, with bootstrap intervals."""
    out = {"fractions": list(REACH_FRACTIONS), "layer": [], "ci_low": [], "ci_high": []}
    for fraction in REACH_FRACTIONS:
        out["layer"].append(int(first_reach(values, layers, fraction)))
        low, high = interval(first_reach(samples, layers, fraction))
        out["ci_low"].append(low)
        out["ci_high"].append(high)
    out["relative_depth"] = [layer / num_layers for layer in out["layer"]]
    return out


def mean_reach_difference(draws: Draws, layers: list[int], group: str, num_layers: int):
    """Mean over f of (task's first-reach layer - hidden state's) / L: point and draws, or None."""
    curves = {t: stacked(draws, t, "headroom_fraction", layers, group) for t in ("task", "hidden_state")}
    if any(c is None for c in curves.values()):
        return None

    def difference(task: np.ndarray, hidden: np.ndarray) -> np.ndarray:
        gaps = [first_reach(task, layers, f) - first_reach(hidden, layers, f) for f in REACH_FRACTIONS]
        return np.mean(gaps, axis=0) / num_layers

    (task, task_draws), (hidden, hidden_draws) = curves["task"], curves["hidden_state"]
    return float(difference(task, hidden)), difference(task_draws, hidden_draws)


def hidden_state_and_task_patterns(
    draws: Draws, layers: list[int], groups: tuple[str, ...], num_layers: int
) -> dict:
    """Figure 3(a), by position group, on headroom fractions (token identity is not counted as
    identification): the layer at which each target first reaches a fraction f of its
    headroom, for every f in 0.50..0.95. Summarised on the first demonstration, where the task
    is still uncertain: the mean over f of (task's layer - hidden state's) / L, and the task's
    headroom fraction at the last layer minus at layer 0, each with a bootstrap interval over
    probe-test rows. Curves and numbers only: the claims are decided by the study's rule
    (`modeling_hmmroformer.experiments.analyses.claims`), not here.
    """
    by_positions = {}
    for group in groups:
        entry = {}
        for target in ("hidden_state", "task"):
            found = stacked(draws, target, "headroom_fraction", layers, group)
            if found is not None:
                entry[target] = reach_curve(*found, layers, num_layers)
        difference = mean_reach_difference(draws, layers, group, num_layers)
        if difference is not None:
            entry["mean_reach_difference"] = {"value": difference[0], "ci": list(interval(difference[1]))}
        task = stacked(draws, "task", "headroom_fraction", layers, group)
        if task is not None:
            gain = task[1][:, -1] - task[1][:, 0]
            entry["task_gain"] = {
                "value": float(task[0][-1] - task[0][0]),
                "ci": list(interval(gain[np.isfinite(gain)])) if np.isfinite(gain).any() else [None, None],
                "first_layer": float(task[0][0]),
                "last_layer": float(task[0][-1]),
            }
        by_positions[group] = entry
    decide = by_positions.get(DECIDING_POSITIONS, {})
    reach, gain = decide.get("mean_reach_difference"), decide.get("task_gain")
    return {
        "positions": DECIDING_POSITIONS,
        "fractions": list(REACH_FRACTIONS),
        "by_positions": by_positions,
        "mean_reach_difference": reach["value"] if reach else None,
        "mean_reach_difference_ci": reach["ci"] if reach else [None, None],
        "task_first_layer_fraction": gain["first_layer"] if gain else None,
        "task_last_layer_fraction": gain["last_layer"] if gain else None,
        "task_gain_ci": gain["ci"] if gain else [None, None],
    }


def peak(draws: Draws, target: str, layers: list[int], group: str) -> dict | None:
    """Peak layer and accuracy of one curve, with bootstrap intervals."""
    found = stacked(draws, target, "accuracy", layers, group)
    if found is None:
        return None
    values, samples = found
    layer_draws = np.asarray(layers)[np.argmax(samples, axis=1)]
    return {
        "peak_layer": int(layers[int(np.argmax(values))]),
        "peak_layer_ci": list(interval(layer_draws)),
        "peak_accuracy": float(values.max()),
        "peak_accuracy_ci": list(interval(samples.max(1))),
        "_layer_draws": layer_draws,
        "_accuracy_draws": samples.max(1),
    }


def previous_token_patterns(
    draws: Draws, records: RecordSet, distances: list[int], layers: list[int]
) -> dict:
    """Figure 3(b) as numbers with bootstrap intervals (all, demonstration and test positions):
    each distance's peak layer and accuracy, its first and last layer, and the nearest minus
    the farthest distance's peak accuracy and peak layer. No verdict: the claims are decided by
    the study's rule (`modeling_hmmroformer.experiments.analyses.claims`).

    Each distance also reports `last_layer_before_final_norm` (accuracy and interval of the last
    layer probed before the final LayerNorm; None for a model without one).
    """
    by_distance, peaks = {}, {}
    for distance in distances:
        target = f"previous_token_{distance}"
        c = records.curve(target)
        found = peak(draws, target, layers, "all")
        peaks[distance] = found
        by_distance[str(distance)] = {
            **{k: v for k, v in found.items() if not k.startswith("_")},
            "first_layer_accuracy": float(c["value"][0]),
            "last_layer_accuracy": float(c["value"][-1]),
            "last_layer_before_final_norm": _value_and_interval(
                records.find(target, BEFORE_NORM_METRIC, layers[-1])
            ),
            "by_positions": {
                group: {k: v for k, v in p.items() if not k.startswith("_")}
                for group in ("demos", "test")
                if (p := peak(draws, target, layers, group)) is not None
            },
        }
    near, far = peaks[distances[0]], peaks[distances[-1]]
    accuracy_drop = near["_accuracy_draws"] - far["_accuracy_draws"]
    layer_shift = far["_layer_draws"] - near["_layer_draws"]
    return {
        "by_distance": by_distance,
        "accuracy_drop": near["peak_accuracy"] - far["peak_accuracy"],
        "accuracy_drop_ci": list(interval(accuracy_drop)),
        "peak_layer_shift": far["peak_layer"] - near["peak_layer"],
        "peak_layer_shift_ci": list(interval(layer_shift)),
    }
