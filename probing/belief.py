"""Belief-state probes: a linear map from the residual stream to the mixture's exact beliefs.

Following Shai et al. (2024), "Transformers represent belief state geometry in their residual
stream": at every layer, a ridge regression (with a bias) from the hidden state at a position
to the exact Bayesian belief there (`hmm_datasets.beliefs`: the task posterior, the true
task's state filter, the joint posterior over (task, state)). One map per layer, belief and
segment (`BELIEF_GROUPS`: demonstration 1, demonstration 2, the later demonstrations, the test
sequence), fitted on the probe-train rows' positions of that segment and scored on the
probe-test rows' positions of the same segment:

- `r2`: 1 - sum of squared errors / sum of squares around the test positions' mean, pooled
  over the belief's entries (1: the belief is a linear image of the layer; 0: no better than
  its mean);
- `kl`: KL(belief ‖ reconstruction) in nats, the reconstruction projected onto the simplex
  (Euclidean projection) and mixed with `KL_FLOOR` of the uniform distribution so that it
  has no zeros.

Shapes: layers, R rows, P positions per row, D features, K entries of a belief.
"""

from __future__ import annotations

import numpy as np
import torch

from hmm_datasets.beliefs import BELIEFS

from .labels import check_columns

RIDGE = 1e-3  # ridge penalty, relative to the mean squared feature
KL_FLOOR = 1e-3  # share of the uniform distribution mixed into a reconstruction
MIN_POSITIONS_PER_FEATURE = 2  # a map is fitted on at least 2 (D + 1) probe-train positions
BELIEF_METRICS = ("r2", "kl")
BELIEF_COLUMNS = ("input_ids", "task_id")  # what the exact beliefs are computed from
BELIEF_GROUPS = ("demo1", "demo2", "later", "test")  # the segments a map is fitted and scored on


def check_belief_columns(rows: dict) -> None:
    """`ValueError` naming the columns the beliefs need (the row's task names the HMM whose state
    filter is the target) and `rows` lacks."""
    check_columns(rows, BELIEF_COLUMNS, "the belief-state probes")


def fit_ridge(x: torch.Tensor, y: torch.Tensor, ridge: float = RIDGE) -> torch.Tensor:
    """`[D + 1, K]` float32: the ridge regression of `y [N, K]` on `x [N, D]` with a bias (last
    row, not penalised); the penalty is `ridge` times the mean squared centred feature. Every
    column of `y` is its own regression (the same as fitting them one by one); the normal
    equations are solved in float64."""
    x, y = x.float(), y.float()
    mean_x, mean_y = x.mean(0), y.mean(0)
    centred = x - mean_x
    gram = (centred.T @ centred).double()
    penalty = ridge * gram.diagonal().mean().clamp_min(1e-12)
    eye = torch.eye(x.shape[1], dtype=gram.dtype)
    weights = torch.linalg.solve(gram + penalty * eye, (centred.T @ (y - mean_y)).double()).float()
    return torch.cat([weights, (mean_y - mean_x @ weights)[None]])


def predict(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """`[N, K]`: the fitted map on `x [N, D]`."""
    return x.to(weights.dtype) @ weights[:-1] + weights[-1]


def r_squared(y: torch.Tensor, y_hat: torch.Tensor) -> float:
    """1 - SSE / SST of `y_hat` against `y [N, K]`, pooled over the K entries (NaN without spread)."""
    total = ((y - y.mean(0)) ** 2).sum()
    return float(1 - ((y - y_hat) ** 2).sum() / total) if total > 0 else float("nan")


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


def belief_scores(x_train, x_test, y_train, y_test, widths: list[int], ridge: float = RIDGE) -> dict:
    """`(belief, metric) -> value`: one map from `x_train [N, D]` to the concatenated beliefs
    `y_train [N, sum(widths)]` (`BELIEFS` in order, `widths` entries each), scored on the test
    positions belief by belief."""
    y_hat = predict(fit_ridge(x_train, y_train, ridge), x_test)
    out = {}
    for belief, truth, guess in zip(BELIEFS, y_test.split(widths, -1), y_hat.split(widths, -1)):
        out[(belief, "r2")] = r_squared(truth, guess)
        out[(belief, "kl")] = kl_to_reconstruction(truth, guess)
    return out


def belief_records(
    features: torch.Tensor,
    layers: list[int],
    beliefs: dict[str, np.ndarray],
    membership: np.ndarray,
    groups: tuple[str, ...],
    split: tuple[np.ndarray, np.ndarray],
    prefix: str = "",
) -> list[dict]:
    """Probe records (`probing.layerwise`'s format, no interval) of every layer of `features
    [layers, R, P, D]`, belief and segment of `BELIEF_GROUPS` (`membership [G, R, P]` of
    `groups`): targets `belief_<name>`, metrics `<prefix>r2` and `<prefix>kl` (prefix
    "untrained_" for the twin). A segment with fewer than `MIN_POSITIONS_PER_FEATURE` (D + 1)
    probe-train positions is left out: too few to fit a map of this width."""
    train, test = split
    widths = [beliefs[name].shape[-1] for name in BELIEFS]
    targets = torch.cat([torch.as_tensor(beliefs[name]).float() for name in BELIEFS], -1)  # [R, P, K]
    out = []
    for group, mask in zip(groups, membership):
        at_train, at_test = torch.as_tensor(mask[train]), torch.as_tensor(mask[test])
        enough = int(at_train.sum()) >= MIN_POSITIONS_PER_FEATURE * (features.shape[-1] + 1)
        if group not in BELIEF_GROUPS or not enough or not bool(at_test.any()):
            continue
        y_train, y_test = targets[train][at_train], targets[test][at_test]
        for layer, layer_features in zip(layers, features):
            x_train, x_test = layer_features[train][at_train], layer_features[test][at_test]
            scores = belief_scores(x_train, x_test, y_train, y_test, widths)
            out += [
                {
                    "target": f"belief_{belief}",
                    "layer": int(layer),
                    "head": None,
                    "metric": f"{prefix}{metric}",
                    "positions": group,
                    "value": value,
                    "ci_low": None,
                    "ci_high": None,
                }
                for (belief, metric), value in scores.items()
            ]
    return out
