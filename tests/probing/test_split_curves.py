"""The claims' split curves: each half of the probe-test rows scored by its own probe, fitted on
its own half of the probe-train rows; the token-only floor of the previous-token probes holds
no previous token."""

import itertools

import numpy as np
import pytest
import torch

from hmm_datasets.corpus import open_corpus
from probing import run as run_module
from probing.config import ProbeConfig
from probing.labels import PREVIOUS_TOKEN_FLOOR, TOKEN_BLOCKS, split_rows, token_features
from probing.layerwise import accuracy_curves, layer_accuracy_hits
from probing.probes import FitSettings
from probing.run import Features, claim_splits, half_splits, probe_beliefs, probe_rows, row_halves

SETTINGS = FitSettings(1e-3, 50, "cpu")
CONFIG = ProbeConfig(
    num_probe_tasks=4, rows_per_task=12, positions_per_row=24, distances=(1, 2), num_splits=2
)


@pytest.mark.parametrize("num_rows", [24, 25])
def test_half_splits_cut_train_and_test_rows_into_disjoint_complementary_halves(num_rows):
    split = split_rows(np.repeat(np.arange(4), num_rows // 4 + 1)[:num_rows], 0.5, seed=0)
    train_masks = []
    for seed in range(3):
        (train_a, test_a), (train_b, test_b) = half_splits(split, seed)
        for rows, a, b in ((split[0], train_a, train_b), (split[1], test_a, test_b)):
            assert np.intersect1d(a, b).size == 0 and a.size == rows.size // 2
            np.testing.assert_array_equal(np.sort(np.concatenate([a, b])), rows)
        np.testing.assert_array_equal(test_a, split[1][row_halves(split[1].size, seed)])  # as before
        train_masks.append(np.isin(split[0], train_a))
        if split[0].size == split[1].size:  # a seed stream of their own, not the test rows' cut
            assert not np.array_equal(train_masks[-1], row_halves(split[1].size, seed))
    for a, b in itertools.combinations(train_masks, 2):
        assert not np.array_equal(a, b)


def noisy_token_probe():
    """Probe rows of the tiny corpus and features that know the current token and the position,
    plus noise: what a probe learns from them depends on the rows it is fitted on."""
    probe = probe_rows(open_corpus("tiny"), CONFIG)
    ids, layout = probe.rows["input_ids"], open_corpus("tiny").layout
    tokens = torch.as_tensor(token_features(ids, probe.positions, layout, 6, PREVIOUS_TOKEN_FLOOR))
    noise = torch.randn((2, *tokens.shape[:2], 8), generator=torch.Generator().manual_seed(0))
    return probe, torch.cat([tokens.expand(2, -1, -1, -1), noise], -1)  # [2 layers, R, P, F + 8]


def test_each_half_is_scored_by_a_probe_fitted_on_its_own_train_half():
    probe, features = noisy_token_probe()
    targets = ["previous_token_1", "previous_token_2"]
    halves = half_splits(probe.split, 0)
    curves = accuracy_curves(features, probe.labels, targets, probe.split, halves, SETTINGS, progress=False)
    groups = {target: np.zeros(len(probe.row_tasks), dtype=np.int64) for target in targets}

    def accuracy(layer: int, target: str, split) -> float:
        hits = layer_accuracy_hits(features[layer], probe.labels, targets, groups, split, SETTINGS)[target]
        return float((hits == 1).sum() / (hits >= 0).sum())

    swapped = [(halves[1][0], halves[0][1]), (halves[0][0], halves[1][1])]  # train half B scores test half A
    crossed = accuracy_curves(features, probe.labels, targets, probe.split, swapped, SETTINGS, progress=False)
    for target in targets:
        assert set(curves[target]) == {"all", "halves_apart"}
        assert [len(c) for c in curves[target]["halves_apart"]] == [len(curves[target]["all"])] * 2 == [2, 2]
        for layer in range(2):
            assert curves[target]["all"][layer] == accuracy(layer, target, probe.split)
            for half in range(2):
                assert curves[target]["halves_apart"][half][layer] == accuracy(layer, target, halves[half])
        assert curves[target]["halves_apart"] != crossed[target]["halves_apart"]  # fitted on other rows
    # not the probe of all probe-train rows read on a half (the shared probe of before)
    shared = layer_accuracy_hits(features[0], probe.labels, targets, groups, probe.split, SETTINGS)
    on_half_a = shared["previous_token_1"][np.isin(probe.split[1], halves[0][1])]
    assert curves["previous_token_1"]["halves_apart"][0][0] != (on_half_a == 1).sum() / (on_half_a >= 0).sum()


def test_the_token_floor_of_the_previous_token_probes_holds_no_previous_token(monkeypatch):
    corpus = open_corpus("tiny")
    probe = probe_rows(corpus, CONFIG)
    every = torch.as_tensor(token_features(probe.rows["input_ids"], probe.positions, corpus.layout, 6))
    holding = Features(every[None], every.new_zeros(0))  # a network that holds every token block
    beliefs = probe_beliefs(corpus, probe)
    splits = claim_splits({"trained": holding}, probe, beliefs, corpus, CONFIG, SETTINGS, progress=False)
    assert len(splits["curves"]) == 2
    for curves in splits["curves"]:
        tokens, trained = curves["tokens"], curves["trained"]
        assert tokens["features"] == {
            "previous_tokens": list(PREVIOUS_TOKEN_FLOOR),
            "beliefs": list(TOKEN_BLOCKS),
        }
        assert "features" not in trained
        assert trained["previous_tokens"]["1"]["all"] == [1.0]  # the previous token, held outright
        assert tokens["previous_tokens"]["1"]["all"][0] < 0.8  # the floor can be beaten
        assert [len(h) for h in tokens["previous_tokens"]["1"]["halves_apart"]] == [1, 1]
        assert tokens["beliefs"] == trained["beliefs"]  # the belief probes of the floor read every block
    # the floor is checked for the answer before it is fitted
    monkeypatch.setattr(run_module, "PREVIOUS_TOKEN_FLOOR", ("current_token", "previous_token"))
    with pytest.raises(ValueError, match="'previous_token' holds the label of previous_token_1"):
        claim_splits({}, probe, beliefs, corpus, CONFIG, SETTINGS, progress=False)
