"""Linear probes that tell a linear signal from noise, with a control task at chance on noise."""

import numpy as np
import pytest
import torch

from probing.layerwise import find, layerwise_probes
from probing.probes import ProbeSettings


def synthetic(signal: bool, rows: int = 80, positions: int = 20, dim: int = 16, classes: int = 5):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, size=(rows, positions))
    tokens = rng.integers(0, 8, size=(rows, positions))
    if signal:
        directions = rng.normal(size=(classes, dim))
        features = directions[labels] + 0.1 * rng.normal(size=(rows, positions, dim))
    else:
        features = rng.normal(size=(rows, positions, dim))
    split = (np.arange(0, rows, 2), np.arange(1, rows, 2))
    return torch.as_tensor(features, dtype=torch.float32)[None], {"target": labels, "token": tokens}, split


@pytest.mark.parametrize("signal", [True, False])
def test_probe_decodes_a_linear_label_and_not_noise_and_control_selectivity_is_chance(signal):
    features, labels, split = synthetic(signal)
    records = layerwise_probes(
        features,
        [0],
        labels,
        ["target"],
        {"target": np.zeros(80, dtype=np.int64)},
        split,
        num_types=8,
        settings=ProbeSettings(),
        num_resamples=200,
        progress=False,
    )
    accuracy = find(records, "target", "accuracy", 0)
    chance = find(records, "target", "chance")["value"]
    if signal:
        assert accuracy["value"] > 0.98
        assert accuracy["ci_low"] <= accuracy["value"] <= accuracy["ci_high"]
    else:
        assert accuracy["value"] < chance + 0.08
        assert abs(find(records, "target", "selectivity", 0)["value"]) < 0.08
        control_chance = find(records, "target", "control_chance")["value"]
        assert find(records, "target", "control_accuracy", 0)["value"] < control_chance + 0.08
