"""Belief-state probes: a planted linear image of the beliefs is read back, noise is not."""

import numpy as np
import pytest
import torch

from hmm_datasets.beliefs import BELIEFS, belief_states
from hmm_datasets.corpus import open_corpus
from probing.belief import (
    BELIEF_GROUPS,
    BELIEF_METRICS,
    LOG_FLOOR,
    belief_ceiling,
    belief_records,
    centred_log,
    check_belief_columns,
    fit_ridge,
    fit_ridge_cv,
    kl_to_reconstruction,
    predict,
    project_to_simplex,
    r_squared,
)
from probing.labels import POSITION_GROUPS, position_group_mask, sample_positions, split_rows


def random_beliefs(rows, positions, seed=0, state_width=4):
    rng = np.random.default_rng(seed)
    sizes = {"task_posterior": 6, "state_filter": state_width, "joint_posterior": 24}
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


def exact_log_features(beliefs):
    """The perfect code: the concatenated log beliefs, floored as the log target is."""
    stacked = np.concatenate([beliefs[name] for name in BELIEFS], -1)
    return torch.as_tensor(np.log(np.maximum(stacked, LOG_FLOOR)), dtype=torch.float32)


def test_centred_log_is_the_floored_log_minus_its_mean():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.7, 0.2, 0.1]])
    clr = centred_log(p)
    torch.testing.assert_close(clr.sum(-1), torch.zeros(2), atol=1e-5, rtol=0)
    logs = torch.log(torch.tensor([0.5, 0.5, LOG_FLOOR]))
    torch.testing.assert_close(clr[0], logs - logs.mean())
    torch.testing.assert_close(centred_log(3 * p[1:]), clr[1:])  # blind to the normalisation


def test_log_r2_scores_the_exact_log_belief_near_one_and_noise_near_zero():
    rows, positions = 400, 12
    beliefs = random_beliefs(rows, positions, state_width=12)  # Dirichlet(0.3): posteriors with spread
    split = (np.arange(0, rows, 2), np.arange(1, rows, 2))
    membership = np.ones((1, rows, positions), dtype=bool)
    perfect = exact_log_features(beliefs)
    noise = torch.randn(perfect.shape, generator=torch.Generator().manual_seed(4))
    records = belief_records(torch.stack([perfect, noise]), [1, 2], beliefs, membership, ("test",), split)
    value = {(r["layer"], r["target"], r["metric"]): r["value"] for r in records}
    assert {r["metric"] for r in records} == set(BELIEF_METRICS) == {"r2", "log_r2", "kl"}
    for name in BELIEFS:
        assert value[(1, f"belief_{name}", "log_r2")] > 0.999
        assert value[(1, f"belief_{name}", "r2")] < 0.9  # not linear in the probabilities
        assert abs(value[(2, f"belief_{name}", "log_r2")]) < 0.05  # 42 noise features, 2400 positions


def per_task_setting(tasks=4, rows_per_task=40, positions=10, width=6, seed=0):
    """Beliefs, row tasks and features whose state filter is a linear image of the features with
    a different map per task (fewer features than tasks x states: no one map fits them all)."""
    rng = np.random.default_rng(seed)
    row_tasks = np.repeat(np.arange(tasks), rows_per_task)
    beliefs = random_beliefs(row_tasks.size, positions, seed=seed)
    beliefs["state_filter"] = rng.dirichlet(np.ones(4), size=(row_tasks.size, positions)).astype(np.float32)
    maps = rng.normal(size=(tasks, 4, width))[row_tasks]  # [R, S, D]
    features = np.einsum("rps,rsd->rpd", beliefs["state_filter"], maps) + 1.0
    return beliefs, row_tasks, torch.as_tensor(features, dtype=torch.float32)


def test_per_task_state_filter_maps_read_what_one_pooled_map_cannot():
    beliefs, row_tasks, features = per_task_setting()
    split = split_rows(row_tasks, 0.5, seed=0)
    membership = np.ones((3, *features.shape[:2]), dtype=bool)
    membership[1] = (row_tasks == 0)[:, None]  # a segment of task 0's rows only: the other tasks are skipped
    membership[2, split[1]] = False  # no probe-test position: no record
    groups = ("test", "later", "demo1")
    records = belief_records(
        features[None], [3], beliefs, membership, groups, split, "twin", row_tasks=row_tasks
    )
    value = {(r["target"], r["metric"], r["positions"]): r["value"] for r in records}
    per_task = [r for r in records if r["target"] == "belief_state_filter_per_task"]
    assert {(r["metric"], r["positions"], r["layer"]) for r in per_task} == {
        (metric, group, 3) for metric in ("r2", "log_r2") for group in groups[:2]
    }
    assert all(r["head"] is None and r["ci_low"] is None and r["ci_high"] is None for r in per_task)
    assert {r["network"] for r in records} == {"twin"}
    assert value[("belief_state_filter_per_task", "r2", "test")] > 0.99
    assert value[("belief_state_filter_per_task", "r2", "later")] > 0.99
    assert value[("belief_state_filter", "r2", "test")] < 0.8  # one map pooled over the tasks
    without = belief_records(features[None], [3], beliefs, membership, groups, split, "twin")
    assert not any(r["target"].endswith("_per_task") for r in without)
    assert [r for r in records if not r["target"].endswith("_per_task")] == without


def test_per_task_maps_fit_on_fewer_positions_than_features():
    beliefs, row_tasks, features = per_task_setting(rows_per_task=4, positions=3)  # 6 train positions a task
    wide = torch.cat(
        [features, torch.randn(*features.shape[:2], 20, generator=torch.Generator().manual_seed(0))], -1
    )
    split = split_rows(row_tasks, 0.5, seed=0)
    membership = np.ones((1, *wide.shape[:2]), dtype=bool)
    records = belief_records(wide[None], [0], beliefs, membership, ("test",), split, row_tasks=row_tasks)
    assert {r["target"] for r in records} == {"belief_state_filter_per_task"}  # too few for a pooled map
    assert all(np.isfinite(r["value"]) for r in records)


def test_the_ceiling_is_what_the_exact_log_beliefs_score():
    corpus = open_corpus("tiny")
    rows = corpus.splits["test"].select(range(64)).with_format("numpy")[:]
    layout, tasks = corpus.layout, np.asarray(rows["task_id"]).astype(np.int64)
    positions = sample_positions(layout, tasks.size, None, seed=0)
    beliefs = belief_states(corpus.params, rows["input_ids"], tasks, positions, device="cpu")
    membership = position_group_mask(layout)[:, positions]
    split = (np.arange(0, tasks.size, 2), np.arange(1, tasks.size, 2))
    records = belief_ceiling(beliefs, membership, POSITION_GROUPS, split, row_tasks=tasks)
    value = {(r["target"], r["metric"], r["positions"]): r["value"] for r in records}
    assert {r["metric"] for r in records} == {"r2", "log_r2"}
    assert {r["network"] for r in records} == {"ceiling"}
    assert {r["layer"] for r in records} == {None}
    assert {r["positions"] for r in records} == set(BELIEF_GROUPS)
    for group in BELIEF_GROUPS:
        assert value[("belief_task_posterior", "log_r2", group)] > 0.99
        assert (
            value[("belief_task_posterior", "r2", group)] < value[("belief_task_posterior", "log_r2", group)]
        )
        assert np.isfinite(value[("belief_state_filter_per_task", "log_r2", group)])
    # per task, 62 features and ~30 probe-train positions in a demonstration, but ~60 in the test
    assert value[("belief_state_filter_per_task", "log_r2", "test")] > 0.99
    assert not any(
        r["target"].endswith("_per_task") for r in belief_ceiling(beliefs, membership, POSITION_GROUPS, split)
    )


def test_the_cross_validated_ridge_is_the_fixed_one_on_a_one_point_grid_and_shrinks_noise():
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 60, 8, generator=generator)
    y = torch.randn(60, 3, generator=generator)
    torch.testing.assert_close(
        fit_ridge_cv(x, y, grid=(0.1,)), fit_ridge(x, y, ridge=0.1), atol=1e-5, rtol=1e-4
    )
    # a clean linear column keeps the smallest penalty, a pure-noise column takes the largest
    clean = x[0] @ torch.arange(1.0, 9.0)[:, None]
    weights = fit_ridge_cv(x[0], torch.cat([clean, y[:, :1]], -1), grid=(1e-3, 100.0))
    torch.testing.assert_close(weights[:-1, 0:1], torch.arange(1.0, 9.0)[:, None], atol=0.05, rtol=0.01)
    assert weights[:-1, 1].abs().max() < 0.05


def test_a_map_on_fewer_positions_than_features_is_shrunk_enough_to_generalise():
    """40 train positions, 64 features, a signal in 4 of them: the fixed 1e-3 ridge overfits the
    noise (held-out R² far below the cross-validated fit's)."""
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(240, 64, generator=generator)
    y = x[:, :4] @ torch.randn(4, 3, generator=generator) + 2.0 * torch.randn(240, 3, generator=generator)
    train, test = slice(0, 40), slice(40, None)
    fixed = r_squared(y[test], predict(fit_ridge(x[train], y[train]), x[test]))
    chosen = r_squared(y[test], predict(fit_ridge_cv(x[train], y[train]), x[test]))
    assert chosen > 0.2 and chosen > fixed + 0.2


def test_generalized_cross_validation_agrees_with_leave_one_out_on_many_positions():
    from probing.belief import generalized_cv_error, leave_one_out_error

    generator = torch.Generator().manual_seed(7)
    x = torch.randn(2000, 6, generator=generator).double()
    y = (
        x[:, :2] @ torch.randn(2, 2, generator=generator).double()
        + torch.randn(2000, 2, generator=generator).double()
    )
    centred, targets = x - x.mean(0), y - y.mean(0)
    values, vectors = torch.linalg.eigh(centred.T @ centred)
    rotated = centred @ vectors
    projected = rotated.T @ targets
    for ridge in (1e-3, 1.0, 100.0):
        inverse = 1.0 / (values + ridge * values.mean())
        exact = leave_one_out_error(rotated, targets, projected, inverse, 2000)
        torch.testing.assert_close(
            generalized_cv_error(values, targets, projected, inverse, 2000), exact, rtol=2e-3, atol=0
        )
