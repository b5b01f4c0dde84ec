"""Belief-state probes: a linear map from the residual stream to the mixture's exact beliefs.

Following Shai et al. (2024), "Transformers represent belief state geometry in their residual
stream": at every layer, a ridge regression (with a bias; its penalty chosen per target entry by
cross-validation, `fit_ridge_cv`) from the hidden state at a position
to the exact Bayesian belief there (`hmm_datasets.beliefs`: the task posterior, the true
task's state filter, the joint posterior over (task, state)). One map per layer, belief and
segment (`BELIEF_GROUPS`: demonstration 1, demonstration 2, the later demonstrations, the test
sequence), fitted on the probe-train rows' positions of that segment and scored on the
probe-test rows' positions of the same segment:

- `r2`: 1 - sum of squared errors / sum of squares around the test positions' mean, pooled
  over the belief's entries (1: the belief is a linear image of the layer; 0: no better than
  its mean);
- `log_r2`: the same R² of a second map, to the belief's centred log (`centred_log`: the log
  of the belief floored at `LOG_FLOOR`, minus its mean over the entries), so that a layer
  holding the log belief, a perfect code that is not linear in the probabilities, scores 1;
- `kl`: KL(belief ‖ reconstruction) in nats, the reconstruction projected onto the simplex
  (Euclidean projection) and mixed with `KL_FLOOR` of the uniform distribution so that it
  has no zeros.

The state filter of one HMM says nothing about another's states, so with the rows' tasks
`belief_records` also fits one state-filter map per task (`belief_state_filter_per_task`: the
mean over tasks of its `r2` and `log_r2`). `belief_ceiling` scores the same fits on the exact
log beliefs themselves: what a perfect code scores.

Shapes: layers, R rows, P positions per row, D features, K entries of a belief.
"""

from __future__ import annotations

import numpy as np
import torch

from hmm_datasets.beliefs import BELIEFS

from .labels import check_columns
from .records import Network, Record

RIDGE = 1e-3  # a fixed ridge penalty, relative to the mean squared feature
# the penalties a map chooses from, column by column, by cross-validation (`fit_ridge_cv`)
RIDGE_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
EXACT_LOO_PER_FEATURE = 10  # below this many train positions per feature, exact leave-one-out
KL_FLOOR = 1e-3  # share of the uniform distribution mixed into a reconstruction
MIN_POSITIONS_PER_FEATURE = 2  # a map is fitted on at least 2 (D + 1) probe-train positions
LOG_FLOOR = 1e-6  # a belief's entries are floored here before their log is taken
BELIEF_METRICS = ("r2", "log_r2", "kl")
BELIEF_COLUMNS = ("input_ids", "task_id")  # what the exact beliefs are computed from
BELIEF_GROUPS = ("demo1", "demo2", "later", "test")  # the segments a map is fitted and scored on
PER_TASK_BELIEF = "state_filter"  # the belief fitted task by task as well, given the rows' tasks
PER_TASK_METRICS = ("r2", "log_r2")


def check_belief_columns(rows: dict) -> None:
    """`ValueError` naming the columns the beliefs need (the row's task names the HMM whose state
    filter is the target) and `rows` lacks."""
    check_columns(rows, BELIEF_COLUMNS, "the belief-state probes")


def fit_ridge(x: torch.Tensor, y: torch.Tensor, ridge: float = RIDGE) -> torch.Tensor:
    """`[..., D + 1, K]` float32: the ridge regression of `y [..., N, K]` on `x [..., N, D]` with
    a bias (last row, not penalised), one for every index of the leading dimensions (`y` may
    lack them: the same targets for all); the penalty is `ridge` times the mean squared
    centred feature. Every column of `y` is its own regression (the same as fitting them one
    by one); the normal equations are solved in float64."""
    x, y = x.float(), y.float()
    mean_x, mean_y = x.mean(-2, keepdim=True), y.mean(-2, keepdim=True)
    centred = x - mean_x
    gram = (centred.mT @ centred).double()
    penalty = ridge * gram.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(1e-12)[..., None, None]
    eye = torch.eye(x.shape[-1], dtype=gram.dtype)
    weights = torch.linalg.solve(gram + penalty * eye, (centred.mT @ (y - mean_y)).double()).float()
    return torch.cat([weights, mean_y - mean_x @ weights], -2)


def fit_ridge_cv(x: torch.Tensor, y: torch.Tensor, grid: tuple[float, ...] = RIDGE_GRID) -> torch.Tensor:
    """`[..., D + 1, K]` float32: `fit_ridge` with the penalty of every column of `y` chosen from
    `grid` (relative to the mean squared centred feature) by its cross-validated squared error
    on the train positions, in closed form from one eigendecomposition of the Gram matrix: a map
    fitted on fewer positions than features is shrunk as much as its own data ask, not by a
    fixed amount. The error is the exact leave-one-out error where the map has fewer than
    `EXACT_LOO_PER_FEATURE` positions per feature, and generalized cross-validation above
    (Golub, Heath and Wahba 1979: the leave-one-out error with the leverages averaged, which
    many positions even out; it costs no pass over the positions per penalty). Shapes as in
    `fit_ridge`."""
    x, y = x.double(), y.double()
    n, width = x.shape[-2], x.shape[-1]
    mean_x, mean_y = x.mean(-2, keepdim=True), y.mean(-2, keepdim=True)
    centred, targets = x - mean_x, y - mean_y
    values, vectors = torch.linalg.eigh(centred.mT @ centred)  # [..., D], [..., D, D]
    values = values.clamp_min(0)
    scale = values.mean(-1, keepdim=True).clamp_min(1e-12)  # the mean squared feature (trace / D)
    rotated = centred @ vectors  # [..., N, D]
    projected = rotated.mT @ targets  # [..., D, K]: the targets on each eigenvector
    exact = n < EXACT_LOO_PER_FEATURE * (width + 1)
    best_error = torch.full(projected.shape[:-2] + projected.shape[-1:], torch.inf, dtype=x.dtype)
    best_inverse = torch.zeros_like(projected)
    for ridge in grid:
        inverse = 1.0 / (values + ridge * scale)  # [..., D]
        if exact:
            error = leave_one_out_error(rotated, targets, projected, inverse, n)
        else:
            error = generalized_cv_error(values, targets, projected, inverse, n)
        better = error < best_error  # [..., K]
        best_inverse = torch.where(better[..., None, :], inverse[..., :, None], best_inverse)
        best_error = torch.where(better, error, best_error)
    weights = vectors @ (best_inverse * projected)  # [..., D, K]
    bias = mean_y.expand(*weights.shape[:-2], 1, y.shape[-1]) - mean_x @ weights
    return torch.cat([weights, bias], -2).float()


def leave_one_out_error(rotated, targets, projected, inverse, n: int) -> torch.Tensor:
    """`[..., K]`: the leave-one-out squared error of a ridge fit (eigenbasis `rotated [..., N,
    D]`, `inverse` = 1 / (eigenvalue + penalty)), each residual over 1 - its leverage (the
    bias's 1 / N included)."""
    fitted = rotated @ (inverse[..., :, None] * projected)  # [..., N, K]
    leverage = (rotated**2 * inverse[..., None, :]).sum(-1, keepdim=True) + 1.0 / n
    return ((targets - fitted) / (1 - leverage).clamp_min(1e-9)).pow(2).sum(-2)


def generalized_cv_error(values, targets, projected, inverse, n: int) -> torch.Tensor:
    """`[..., K]`: the generalized cross-validation error of a ridge fit, residual sum of squares
    / (1 - degrees of freedom / N)², from the eigenvalues alone (infinite where the fit has as
    many degrees of freedom as positions)."""
    shrink = values * inverse  # [..., D]: 0 (all shrunk) .. 1 (not at all)
    explained = projected**2 / values.clamp_min(1e-300)[..., :, None]  # what each direction can fit
    residual = (targets**2).sum(-2) - (explained * (2 * shrink - shrink**2)[..., :, None]).sum(-2)
    freedom = 1.0 - (shrink.sum(-1, keepdim=True) + 1.0) / n  # the bias is one more
    return torch.where(freedom > 0, residual / freedom.clamp_min(1e-12) ** 2, torch.inf)


def predict(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """`[..., N, K]`: the fitted map(s) `weights [..., D + 1, K]` on `x [..., N, D]`."""
    return x.to(weights.dtype) @ weights[..., :-1, :] + weights[..., -1:, :]


def r_squared(y: torch.Tensor, y_hat: torch.Tensor) -> float:
    """1 - SSE / SST of `y_hat` against `y [N, K]`, pooled over the K entries (NaN without spread)."""
    total = ((y - y.mean(0)) ** 2).sum()
    return float(1 - ((y - y_hat) ** 2).sum() / total) if total > 0 else float("nan")


def centred_log(p: torch.Tensor) -> torch.Tensor:
    """`[..., K]`: the centred log of the distributions `p [..., K]`, log(max(p, `LOG_FLOOR`))
    minus its mean over the K entries (the centred log-ratio: a linear image of the log
    belief, blind to its normalisation)."""
    logs = torch.log(p.float().clamp_min(LOG_FLOOR))
    return logs - logs.mean(-1, keepdim=True)


def centred_logs(y: torch.Tensor, widths: list[int]) -> torch.Tensor:
    """`[..., sum(widths)]`: the centred log of every belief of the concatenation `y` (`widths`
    entries each)."""
    return torch.cat([centred_log(part) for part in y.split(widths, -1)], -1)


def project_to_simplex(v: torch.Tensor, top: int = 48) -> torch.Tensor:
    """`[N, K]`: the Euclidean projection of every row of `v` onto the probability simplex.

    The threshold depends only on the entries above it, so each row's largest `top` are found
    first (`topk`, much cheaper than sorting a wide row); the rows whose support reaches `top`
    are sorted in full. Both give the same numbers as a full sort."""
    if v.shape[-1] <= top:
        return (v - simplex_threshold(v.sort(-1, descending=True).values)).clamp_min(0)
    threshold, support = simplex_threshold(v.topk(top, -1).values, with_support=True)
    wide = (support == top).squeeze(-1)
    if bool(wide.any()):
        threshold[wide] = simplex_threshold(v[wide].sort(-1, descending=True).values)
    return (v - threshold).clamp_min(0)


def simplex_threshold(ordered: torch.Tensor, with_support: bool = False):
    """`[N, 1]`: the projection's threshold from each row's largest entries in descending order
    (all of them, or enough to hold the support), and with `with_support` the support size."""
    cumulative = ordered.cumsum(-1) - 1
    index = torch.arange(1, ordered.shape[-1] + 1, dtype=ordered.dtype)
    support = (ordered - cumulative / index > 0).sum(-1, keepdim=True)  # >= 1
    threshold = cumulative.gather(-1, support - 1) / support
    return (threshold, support) if with_support else threshold


def kl_to_reconstruction(y: torch.Tensor, y_hat: torch.Tensor, floor: float = KL_FLOOR) -> float:
    """Mean over rows of KL(y ‖ q) in nats, q the simplex projection of `y_hat` mixed with
    `floor` of the uniform distribution."""
    q = (1 - floor) * project_to_simplex(y_hat) + floor / y.shape[-1]
    terms = torch.where(y > 0, y * (torch.log(y.clamp_min(1e-30)) - torch.log(q)), 0.0)
    return float(terms.sum(-1).mean())


def belief_scores(x_train, x_test, y_train, y_test, widths: list[int]) -> dict:
    """`(belief, metric) -> value` for the metrics of `BELIEF_METRICS`: one map from `x_train [N, D]`
    to the concatenated beliefs `y_train [N, sum(widths)]` (`BELIEFS` in order, `widths` entries
    each) and one to their centred logs (fitted together: every column is its own regression),
    scored on the test positions belief by belief."""
    width = sum(widths)
    weights = fit_ridge_cv(x_train, torch.cat([y_train, centred_logs(y_train, widths)], -1))
    y_hat, log_hat = predict(weights, x_test).split([width, width], -1)
    parts = zip(
        BELIEFS,
        y_test.split(widths, -1),
        y_hat.split(widths, -1),
        centred_logs(y_test, widths).split(widths, -1),
        log_hat.split(widths, -1),
    )
    out = {}
    for belief, truth, guess, log_truth, log_guess in parts:
        out[(belief, "r2")] = r_squared(truth, guess)
        out[(belief, "log_r2")] = r_squared(log_truth, log_guess)
        out[(belief, "kl")] = kl_to_reconstruction(truth, guess)
    return out


def task_scores(x_train, x_test, y_train, y_test) -> np.ndarray:
    """`[layers, 2]`: the `r2` and `log_r2` of one map per layer from `x_train [layers, N, D]` to
    one belief `y_train [N, K]` and one to its centred log, scored on `x_test [layers, M, D]`
    against `y_test [M, K]` (NaN without spread)."""
    width = y_train.shape[-1]
    weights = fit_ridge_cv(x_train, torch.cat([y_train, centred_log(y_train)], -1))
    log_test = centred_log(y_test)
    scores = [
        (r_squared(y_test, guess[:, :width]), r_squared(log_test, guess[:, width:]))
        for guess in predict(weights, x_test)
    ]
    return np.array(scores, dtype=np.float64).reshape(-1, 2)


def per_task_scores(features, belief, mask, split, row_tasks) -> np.ndarray | None:
    """`[layers, 2]`: the mean over tasks of `task_scores` (`r2`, `log_r2`) of one map per task
    from `features [layers, R, P, D]` to `belief [R, P, K]` at the positions `mask [R, P]`,
    fitted on the task's probe-train rows and scored on its probe-test rows. A task without a
    train or a test position is skipped (None when every task is), and a score without spread
    (NaN) is not counted (NaN where no task counts)."""
    train, test = split
    tasks = np.asarray(row_tasks)
    scores = []
    for task in np.unique(tasks):
        (train_rows, train_at), (test_rows, test_at) = (
            masked_positions(rows[tasks[rows] == task], mask) for rows in (train, test)
        )
        if train_rows.numel() == 0 or test_rows.numel() == 0:
            continue
        x_train, x_test = features[:, train_rows, train_at], features[:, test_rows, test_at]
        scores.append(task_scores(x_train, x_test, belief[train_rows, train_at], belief[test_rows, test_at]))
    if not scores:
        return None
    scores = np.stack(scores)  # [tasks, layers, 2]
    counted = np.isfinite(scores)
    total = np.where(counted, scores, 0.0).sum(0)
    return np.divide(total, counted.sum(0), out=np.full(total.shape, np.nan), where=counted.any(0))


def masked_positions(rows: np.ndarray, mask: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """`([n], [n])`: the row and position indices of the positions of `rows` that `mask [R, P]`
    keeps, in row-major order (the order of boolean indexing), to gather them in one step."""
    row, at = np.nonzero(mask[rows])
    return torch.as_tensor(rows[row]), torch.as_tensor(at)


def belief_record(target: str, layer, metric: str, group: str, value: float, network: Network) -> dict:
    """One probe record as JSON (`Record.to_json`, no interval); `layer` None for a record of
    no layer (the ceiling)."""
    return Record(
        target, None if layer is None else int(layer), None, metric, group, network, value
    ).to_json()


def belief_records(
    features: torch.Tensor,
    layers: list,
    beliefs: dict[str, np.ndarray],
    membership: np.ndarray,
    groups: tuple[str, ...],
    split: tuple[np.ndarray, np.ndarray],
    network: Network = "trained",
    row_tasks: np.ndarray | None = None,
) -> list[dict]:
    """Probe records (`probing.layerwise`'s format, no interval) of every layer of `features
    [layers, R, P, D]` (`layers`: their numbers, or None), belief and segment of
    `BELIEF_GROUPS` (`membership [G, R, P]` of `groups`) of `network`: targets `belief_<name>`,
    metrics `r2`, `log_r2` and `kl`. A segment with fewer than `MIN_POSITIONS_PER_FEATURE`
    (D + 1) probe-train positions is left out: too few to fit a map of this width.

    With `row_tasks [R]` (each row's task), also the target `belief_state_filter_per_task`:
    metrics `r2` and `log_r2`, the mean over tasks of one state-filter map per task (`per_task_scores`; no minimum of positions: the ridge copes with fewer positions
    than features; left out where no task has both train and test positions, NaN where no
    task's belief has spread)."""
    train, test = split
    widths = [beliefs[name].shape[-1] for name in BELIEFS]
    targets = torch.cat([torch.as_tensor(beliefs[name]).float() for name in BELIEFS], -1)  # [R, P, K]
    per_task = torch.as_tensor(beliefs[PER_TASK_BELIEF]).float()
    out = []
    for group, mask in zip(groups, membership):
        if group not in BELIEF_GROUPS:
            continue
        at_train, at_test = torch.as_tensor(mask[train]), torch.as_tensor(mask[test])
        enough = int(at_train.sum()) >= MIN_POSITIONS_PER_FEATURE * (features.shape[-1] + 1)
        if enough and bool(at_test.any()):
            y_train, y_test = targets[train][at_train], targets[test][at_test]
            for layer, layer_features in zip(layers, features):
                x_train, x_test = layer_features[train][at_train], layer_features[test][at_test]
                scores = belief_scores(x_train, x_test, y_train, y_test, widths)
                out += [
                    belief_record(f"belief_{belief}", layer, metric, group, value, network)
                    for (belief, metric), value in scores.items()
                ]
        scores = None if row_tasks is None else per_task_scores(features, per_task, mask, split, row_tasks)
        if scores is not None:
            out += [
                belief_record(
                    f"belief_{PER_TASK_BELIEF}_per_task", layer, metric, group, float(value), network
                )
                for layer, layer_scores in zip(layers, scores)
                for metric, value in zip(PER_TASK_METRICS, layer_scores)
            ]
    return out


def belief_ceiling(
    beliefs: dict[str, np.ndarray],
    membership: np.ndarray,
    groups: tuple[str, ...],
    split: tuple[np.ndarray, np.ndarray],
    row_tasks: np.ndarray | None = None,
) -> list[dict]:
    """What a perfect code scores: `belief_records` of the exact log beliefs as the features
    (log(max(p, `LOG_FLOOR`)) of every belief of `BELIEFS`, concatenated; one "layer", `layer`
    None, network "ceiling"), metrics `r2` and `log_r2` (no `kl`), per task as well with
    `row_tasks`."""
    features = torch.cat(
        [torch.as_tensor(beliefs[name]).float().clamp_min(LOG_FLOOR).log() for name in BELIEFS], -1
    )
    records = belief_records(features[None], [None], beliefs, membership, groups, split, "ceiling", row_tasks)
    return [record for record in records if record["metric"] != "kl"]
