"""Belief-state probes: a planted linear image of the beliefs is read back, noise is not."""

import numpy as np
import pytest
import torch

from hmm_datasets.beliefs import BELIEFS
from probing.belief import (
    belief_records,
    check_belief_columns,
    fit_ridge,
    kl_to_reconstruction,
    predict,
    project_to_simplex,
    r_squared,
)


def random_beliefs(rows, positions, seed=0):
    rng = np.random.default_rng(seed)
    sizes = {"task_posterior": 6, "state_filter": 4, "joint_posterior": 24}
    return {
        name: rng.dirichlet(np.full(k, 0.3), size=(rows, positions)).astype(np.float32)
        for name, k in sizes.items()
    }


def planted_features(beliefs, width=48, seed=1):
    """Features that are a linear image of the beliefs (plus a constant): a perfect probe exists."""
    rng = np.random.default_rng(seed)
    stacked = np.concatenate([beliefs[name] for name in BELIEFS], -1)
    return torch.as_tensor(stacked @ rng.normal(size=(stacked.shape[-1], width)) + 3.0, dtype=torch.float32)


def test_r2_is_one_on_planted_activations_and_near_zero_on_noise():
    rows, positions = 80, 12
    beliefs = random_beliefs(rows, positions)
    split = (np.arange(0, rows, 2), np.arange(1, rows, 2))
    membership = np.ones((1, rows, positions), dtype=bool)
    planted = planted_features(beliefs)
    noise = torch.randn(rows, positions, planted.shape[-1], generator=torch.Generator().manual_seed(3))
    records = belief_records(torch.stack([planted, noise]), [1, 2], beliefs, membership, ("test",), split)
    value = {(r["layer"], r["target"], r["metric"]): r["value"] for r in records}
    for name in BELIEFS:
        assert value[(1, f"belief_{name}", "r2")] > 0.999
        assert value[(1, f"belief_{name}", "kl")] < 0.01
        assert -0.3 < value[(2, f"belief_{name}", "r2")] < 0.1  # 48 noise features, 480 positions
        assert value[(2, f"belief_{name}", "kl")] > 10 * value[(1, f"belief_{name}", "kl")]


def test_scores_come_from_held_out_rows_only():
    rows, positions = 60, 10
    beliefs = random_beliefs(rows, positions)
    membership = np.ones((rows, positions), dtype=bool)
    # features that memorise the train rows' beliefs and are noise elsewhere
    features = torch.randn(rows, positions, 40, generator=torch.Generator().manual_seed(0))
    train, test = np.arange(30), np.arange(30, 60)
    stacked = np.concatenate([beliefs[name] for name in BELIEFS], -1)
    features[train, :, :34] = torch.as_tensor(stacked[train])
    held_out = belief_records(features[None], [0], beliefs, membership[None], ("test",), (train, test))
    leaked = belief_records(features[None], [0], beliefs, membership[None], ("test",), (train, train))
    r2 = {(r["target"]): r["value"] for r in held_out if r["metric"] == "r2"}
    assert all(value < 0.3 for value in r2.values())
    assert all(r["value"] > 0.99 for r in leaked if r["metric"] == "r2")


def test_ridge_recovers_an_exact_linear_map_and_r2_is_pooled():
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.normal(size=(200, 5)))
    true = torch.as_tensor(rng.normal(size=(5, 3)))
    y = x @ true + 0.5
    weights = fit_ridge(x, y, ridge=0.0)
    torch.testing.assert_close(weights[:-1], true.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(predict(weights, x), y.float(), atol=1e-4, rtol=1e-4)
    # several outputs at once are the same regressions as one by one
    torch.testing.assert_close(fit_ridge(x, y)[:, 1:2], fit_ridge(x, y[:, 1:2]))
    assert r_squared(y, y) == 1.0
    assert r_squared(y, y.mean(0).expand_as(y)) == pytest.approx(0.0)


def test_simplex_projection():
    points = torch.tensor([[0.2, 0.3, 0.5], [2.0, 0.0, -1.0], [0.5, 0.5, 0.5], [-1.0, -1.0, -1.0]])
    projected = project_to_simplex(points)
    torch.testing.assert_close(projected.sum(-1), torch.ones(4))
    assert (projected >= 0).all()
    torch.testing.assert_close(projected[0], points[0])  # already a distribution
    torch.testing.assert_close(projected[1], torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(projected[2], torch.full((3,), 1 / 3))
    torch.testing.assert_close(projected[3], torch.full((3,), 1 / 3))
    # the projection is the closest point: no random distribution is closer
    candidates = torch.distributions.Dirichlet(torch.ones(3)).sample((2000,))
    for point, best in zip(points, projected):
        assert ((candidates - point) ** 2).sum(-1).min() >= ((best - point) ** 2).sum() - 1e-6


def test_kl_of_an_exact_reconstruction_is_only_the_floor():
    y = torch.tensor([[0.7, 0.2, 0.1]], dtype=torch.float64)
    assert kl_to_reconstruction(y, y) < 2e-3
    assert kl_to_reconstruction(y, torch.tensor([[0.0, 0.0, 1.0]])) > 1.0


def test_rows_without_the_task_column_are_refused_with_its_name():
    with pytest.raises(ValueError, match=r"\['task_id'\]"):
        check_belief_columns({"input_ids": np.zeros((2, 3)), "hidden_states": np.zeros((2, 3))})


def test_the_top_entries_projection_equals_the_full_sort():
    """Wide rows are projected from their largest entries; rows whose support does not fit in
    them fall back to a full sort; both give exactly the full sort's numbers."""
    rng = np.random.default_rng(0)
    sparse = rng.normal(0, 0.05, size=(200, 384))  # a noisy reconstruction: a small support
    sparse[np.arange(200), rng.integers(0, 384, 200)] += 1.0
    flat = np.full((50, 384), 1 / 384) + rng.normal(0, 1e-4, size=(50, 384))  # supports of ~all 384
    points = torch.as_tensor(np.concatenate([sparse, flat]))
    full = project_to_simplex(points, top=384)
    for top in (4, 48):
        assert torch.equal(project_to_simplex(points, top=top), full)
    torch.testing.assert_close(full.sum(-1), torch.ones(250, dtype=torch.float64))
