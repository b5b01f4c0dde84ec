"""Linear probes that tell a linear signal from noise; baselines and headroom fractions that
count token identity as nothing and the ceiling as everything."""

import numpy as np
import pytest
import torch

from probing.layerwise import (
    Draws,
    counts_to_records,
    first_reach,
    group_counts,
    headroom_records,
    layerwise_probes,
)
from probing.probes import FitSettings, token_majority_hits
from probing.records import RecordSet

ROWS, POSITIONS, TOKENS, CLASSES = 80, 20, 8, 5
SPLIT = (np.arange(0, ROWS, 2), np.arange(1, ROWS, 2))


def synthetic(features_of: str):
    """Labels that the token tells in part (token t has label t mod 5 with probability 0.6),
    and features that carry the label (`label`), only the token (`token`) or nothing (`noise`)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, TOKENS, size=(ROWS, POSITIONS))
    labels = np.where(
        rng.random(tokens.shape) < 0.6, tokens % CLASSES, rng.integers(0, CLASSES, tokens.shape)
    )
    codes = {
        "label": np.eye(CLASSES)[labels],
        "token": np.eye(TOKENS)[tokens],
        "noise": rng.normal(size=(ROWS, POSITIONS, 16)),
    }[features_of]
    features = codes + 0.01 * rng.normal(size=codes.shape)
    return torch.as_tensor(features, dtype=torch.float32)[None], {"target": labels, "token": tokens}


def probe(features, labels, draws=None):
    return layerwise_probes(
        features,
        [0],
        labels,
        ["target"],
        {"target": np.zeros(ROWS, dtype=np.int64)},
        SPLIT,
        settings=FitSettings(),
        num_resamples=200,
        draws=draws,
        progress=False,
    )


@pytest.mark.parametrize("features_of", ["label", "noise"])
def test_probe_decodes_a_linear_label_and_not_noise(features_of):
    records, _ = probe(*synthetic(features_of))
    accuracy = RecordSet(records).find("target", "accuracy", 0)
    chance = RecordSet(records).find("target", "chance", network="floor").value
    if features_of == "label":
        assert accuracy.value > 0.98
        assert accuracy.ci_low <= accuracy.value <= accuracy.ci_high
    else:
        assert accuracy.value < chance + 0.08


def test_token_majority_answers_each_tokens_most_frequent_label():
    tokens, labels = np.array([0, 0, 0, 1, 1, 2]), np.array([3, 3, 4, 5, 5, 6])
    hits = token_majority_hits(tokens, labels, np.array([0, 1, 2, 9]), np.array([3, 5, 6, 3]))
    assert hits.tolist() == [
        True,
        True,
        True,
        True,
    ]  # token 9 unseen: the overall majority (3, first of the tied)
    assert token_majority_hits(tokens, labels, np.array([0]), np.array([4])).tolist() == [False]


@pytest.mark.parametrize(("features_of", "expected"), [("token", 0.0), ("label", 1.0)])
def test_headroom_fraction_is_zero_for_token_identity_and_one_at_the_ceiling(features_of, expected):
    """The ceiling here is perfect knowledge of the label (accuracy 1 on every test position)."""
    features, labels = synthetic(features_of)
    draws = Draws()
    probe(features, labels, draws)
    test_labels = labels["target"][SPLIT[1]]
    perfect = np.where(test_labels >= 0, 1, -1).astype(np.int8)[None]
    correct, total = group_counts(perfect, np.ones((1, *test_labels.shape), dtype=bool))
    counts_to_records("target", None, ("ceiling",), correct, total, ("all",), 200, 0, draws)
    baseline = RecordSet(probe(features, labels)[0]).find("target", "token_baseline", network="floor").value
    assert 0.5 < baseline < 0.9  # the token tells part of the label: there is headroom

    from probing import layerwise

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(layerwise.CEILINGS, "target", "ceiling")
        (fraction,) = headroom_records(draws, "target", [0], ("all",))
    assert fraction["value"] == pytest.approx(expected, abs=0.03)
    assert fraction["ci_low"] <= fraction["value"] + 1e-9 and fraction["value"] <= fraction["ci_high"] + 1e-9


def test_first_reach_is_the_first_layer_at_or_above_the_fraction_and_past_the_end_when_never():
    values = np.array([[0.1, 0.6, 0.95, 0.9], [0.1, 0.2, 0.3, 0.4]])
    assert first_reach(values, [0, 1, 2, 3], 0.5).tolist() == [1, 4]
    assert first_reach(values, [0, 1, 2, 3], 0.9).tolist() == [2, 4]


def test_a_probe_is_scored_on_rows_it_was_not_fitted_on():
    """Features that let a linear probe memorise every position (random codes in more
    dimensions than there are positions) and labels that nothing predicts: held out, the probe
    is at chance; had the probe-train rows included the probe-test rows, it would be near 1."""
    rng = np.random.default_rng(1)
    features = torch.as_tensor(rng.normal(size=(1, ROWS, POSITIONS, 2048)), dtype=torch.float32)
    labels = {
        "target": rng.integers(0, CLASSES, size=(ROWS, POSITIONS)),
        "token": np.zeros((ROWS, POSITIONS)),
    }
    common = {"settings": FitSettings(), "num_resamples": 50, "progress": False}
    args = (features, [0], labels, ["target"], {"target": np.zeros(ROWS, dtype=np.int64)})
    held_out, _ = layerwise_probes(*args, SPLIT, **common)
    assert RecordSet(held_out).find("target", "accuracy", 0).value < 1 / CLASSES + 0.05
    leaked, _ = layerwise_probes(*args, (np.arange(ROWS), SPLIT[1]), **common)
    assert RecordSet(leaked).find("target", "accuracy", 0).value > 0.9  # what the test would catch


def overlapping_classes(seed: int, rows: int = 60, dim: int = 12):
    """Features `[rows, POSITIONS, dim]` and two targets whose classes overlap in feature space
    (no probe is perfect, so the fit has one well-defined optimum to agree on)."""
    rng = np.random.default_rng(seed)
    labels = {name: rng.integers(0, CLASSES, size=(rows, POSITIONS)) for name in ("a", "b")}
    labels["b"][:, :3] = -1  # unlabelled positions (as the first tokens of a previous-token target)
    means = rng.normal(size=(2, CLASSES, dim))
    features = (
        means[0][labels["a"]]
        + means[1][np.maximum(labels["b"], 0)]
        + 1.5 * rng.normal(size=(rows, POSITIONS, dim))
    )
    labels["token"] = np.zeros((rows, POSITIONS), dtype=np.int64)
    return torch.as_tensor(features, dtype=torch.float32), labels


def test_the_batched_probes_answer_as_one_reference_fit_per_probe():
    """The fast path (every probe of a layer in one batched L-BFGS, `layer_accuracy_hits`)
    against the reference (one torch L-BFGS fit per probe, `probe_hits`) on a fixed seed: the
    same minimum, so the same answers up to the last steps of the optimisers."""
    from probing.layerwise import layer_accuracy_hits
    from probing.probes import probe_hits

    features, labels = overlapping_classes(seed=3)
    rows = features.shape[0]
    split = (np.arange(0, rows, 2), np.arange(1, rows, 2))
    groups = {"a": np.zeros(rows, dtype=np.int64), "b": np.arange(rows) % 3}  # "b": one probe per row group
    fast = layer_accuracy_hits(features, labels, ["a", "b"], groups, split, FitSettings())
    for target in ("a", "b"):
        for group in np.unique(groups[target]):
            train, test = (rows_[groups[target][rows_] == group] for rows_ in split)
            y_train, y_test = labels[target][train], labels[target][test]
            x_train, x_test = (
                features[train][torch.as_tensor(y_train >= 0)],
                features[test][torch.as_tensor(y_test >= 0)],
            )
            reference = probe_hits(
                x_train, y_train[y_train >= 0], x_test, y_test[y_test >= 0], FitSettings(max_iter=500)
            )
            batched = fast[target][np.searchsorted(split[1], test)][y_test >= 0]
            assert 0.3 < reference.mean() < 0.95  # neither chance nor separable
            assert np.mean(batched == reference) >= 0.99, (target, group)
            assert abs(batched.mean() - reference.mean()) <= 0.005, (target, group)
        assert (fast[target][labels[target][split[1]] < 0] == -1).all()  # unlabelled: not scored


def test_a_probe_fitted_in_a_batch_is_the_probe_fitted_alone():
    from probing.probes import fit_probes

    features, labels = overlapping_classes(seed=4)
    x = features.reshape(-1, features.shape[-1])
    y = torch.as_tensor(np.stack([labels["a"].reshape(-1), labels["b"].reshape(-1)]))
    both = fit_probes(x, y, torch.tensor([CLASSES, CLASSES]), FitSettings())
    alone = fit_probes(x, y[1:], torch.tensor([CLASSES]), FitSettings())
    assert torch.equal(both.predict(x)[1], alone.predict(x)[0])
    assert torch.allclose(both.weights[1], alone.weights[0], atol=1e-4)


def test_batched_lbfgs_finds_each_rows_minimum():
    from probing.probes import batched_lbfgs

    rng = np.random.default_rng(0)
    a = torch.as_tensor(rng.normal(size=(3, 6, 6)))
    hessians = a @ a.transpose(1, 2) + torch.eye(6) * torch.tensor([0.1, 1.0, 10.0])[:, None, None]
    targets = torch.as_tensor(rng.normal(size=(3, 6)))

    evaluated = []

    def objective(rows):
        evaluated.append(rows.tolist())

        def loss_and_grad(x):
            delta = x - targets[rows]
            grad = (hessians[rows] @ delta[..., None])[..., 0]
            return 0.5 * (delta * grad).sum(1), grad

        return loss_and_grad

    found = batched_lbfgs(objective, torch.zeros(3, 6, dtype=torch.float64), 200, 1e-14)
    assert torch.allclose(found, targets, atol=1e-6)
    # the objective is rebuilt only when rows stop, and a row that has stopped is not in it
    # again (the rows stop at different iterations)
    assert evaluated[0] == [0, 1, 2] and 1 < len(evaluated) <= 3
    assert all(len(later) < len(earlier) for earlier, later in zip(evaluated, evaluated[1:]))
    # each row's result is the one it reaches alone
    for row in range(3):
        alone = batched_lbfgs(
            lambda rows, row=row: objective(rows + row),
            torch.zeros(1, 6, dtype=torch.float64),
            200,
            1e-14,
        )
        assert torch.equal(alone[0], found[row])


def quadratic_rows(seed: int = 0, rows: int = 3, dim: int = 6):
    """Hessians `[rows, dim, dim]` of condition 10 to 1000 and minima `[rows, dim]`."""
    rng = np.random.default_rng(seed)
    a = torch.as_tensor(rng.normal(size=(rows, dim, dim)))
    hessians = a @ a.transpose(1, 2) + torch.eye(dim) * torch.tensor([0.1, 1.0, 10.0])[:rows, None, None]
    return hessians, torch.as_tensor(rng.normal(size=(rows, dim)))


def test_a_failed_line_search_does_not_end_the_fit():
    """Once the first step has landed, the next line search meets a loss that overflows at
    every trial point (as a far step of a softmax can): the rows must stay where they were and
    go on, by steepest descent, to their minima, not stop there (a failed search changes the
    loss by nothing, which a stopping rule on the loss change alone reads as converged)."""
    from probing.probes import batched_lbfgs

    hessians, targets = quadratic_rows()
    calls, state = [], {"first": None, "overflowing": None}

    def objective(rows):
        def loss_and_grad(x):
            delta = x - targets[rows]
            grad = (hessians[rows] @ delta[..., None])[..., 0]
            loss = 0.5 * (delta * grad).sum(1)
            calls.append(float(loss.sum()))
            if state["first"] is None:
                state["first"] = loss
            elif state["overflowing"] is None and bool((loss < state["first"]).all()):
                state["overflowing"] = 31  # the whole next search: a first try and 30 halvings
            elif state["overflowing"]:
                state["overflowing"] -= 1
                return torch.full_like(loss, float("inf")), grad
            return loss, grad

        return loss_and_grad

    found = batched_lbfgs(objective, torch.zeros(3, 6, dtype=torch.float64), 300, 1e-14)
    assert state["overflowing"] == 0 and len(calls) > 40  # the search failed; the fit went on
    assert torch.allclose(found, targets, atol=1e-6)


def test_probe_fits_reach_the_minimum_with_constant_and_collinear_features():
    """Features with constant columns (zero and not) and an exact linear dependence, the
    labels overlapping (one finite minimum): the batched fit's loss equals a float64 reference
    minimum (torch's L-BFGS run to its tolerances on the varying features alone), and the
    constant features get no weight. One line search or a few steps stop far above it."""
    from probing.probes import FitSettings, fit_probes, probe_loss_and_grad

    features, labels = overlapping_classes(seed=5, rows=40, dim=6)
    x = features.reshape(-1, 6)
    x = torch.cat(
        [x, x[:, :2].sum(1, keepdim=True), torch.zeros(len(x), 3), torch.full((len(x), 2), -0.18)], 1
    )
    y = torch.as_tensor(labels["a"].reshape(1, -1))
    settings = FitSettings()

    def loss_of(probes) -> float:
        weight = torch.full((1, 1, len(x)), 1.0 / len(x))
        return float(probe_loss_and_grad(probes, x, weight, y[:, None], settings.l2)[0])

    probes = fit_probes(x, y, torch.tensor([CLASSES]), settings)
    assert (probes.scale[0, 7:] == 0).all() and (probes.scale[0, :7] > 0).all()
    varying = x[:, :7].double()
    z = (varying - varying.mean(0)) / varying.std(0)
    w = torch.zeros(7, CLASSES, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(CLASSES, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [w, b], max_iter=2000, tolerance_grad=1e-12, tolerance_change=1e-15, line_search_fn="strong_wolfe"
    )

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(z @ w + b, y[0]) + 0.5 * settings.l2 * w.square().sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    minimum = float(closure().detach())
    assert loss_of(probes) == pytest.approx(minimum, rel=1e-5, abs=1e-6)
    early = fit_probes(x, y, torch.tensor([CLASSES]), FitSettings(max_iter=3))
    assert loss_of(early) > minimum + 1e-3  # what the comparison would catch
