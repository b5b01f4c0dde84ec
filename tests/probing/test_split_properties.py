"""The probe splits and the halves of their probe-test rows: disjoint, complete, balanced, and
different from seed to seed, both as drawn directly and as `claim_splits` draws them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hmm_datasets.corpus import open_corpus
from probing import run as run_module
from probing.config import ProbeConfig
from probing.labels import split_rows
from probing.run import claim_splits, probe_rows, row_halves


def _row_tasks(num_tasks: int = 5, per_task: int = 12) -> np.ndarray:
    return np.repeat(np.arange(num_tasks), per_task)  # task-major, as the probe rows come


def _check_split(split, row_tasks: np.ndarray, train_fraction: float) -> None:
    train, test = split
    assert np.intersect1d(train, test).size == 0  # no probe-test row is trained on
    np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(row_tasks.size))
    assert np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)  # sorted, no repeats
    for task in np.unique(row_tasks):  # every task in both, at the same share
        size = int((row_tasks == task).sum())
        assert int((row_tasks[train] == task).sum()) == int(round(size * train_fraction)), task


@pytest.mark.parametrize("train_fraction", [0.25, 0.5, 0.75])
def test_a_split_partitions_the_rows_at_the_same_share_of_every_task(train_fraction):
    row_tasks = _row_tasks()
    for seed in range(4):
        _check_split(split_rows(row_tasks, train_fraction, seed), row_tasks, train_fraction)
    shuffled = np.random.default_rng(0).permutation(row_tasks)  # rows need not come task-major
    _check_split(split_rows(shuffled, train_fraction, 0), shuffled, train_fraction)


def test_the_split_seeds_give_different_probe_test_rows_and_one_seed_the_same():
    row_tasks = _row_tasks()
    config = ProbeConfig(seed=3)
    assert config.split_seeds == (3, 4, 5)
    tests = [split_rows(row_tasks, 0.5, seed)[1] for seed in config.split_seeds]
    for a, b in itertools.combinations(tests, 2):
        assert not np.array_equal(a, b)
    for seed, test in zip(config.split_seeds, tests):
        np.testing.assert_array_equal(split_rows(row_tasks, 0.5, seed)[1], test)  # reproducible


@pytest.mark.parametrize("num_rows", [0, 1, 2, 7, 32, 33])
def test_row_halves_cut_the_rows_in_two_complementary_halves(num_rows):
    halves = row_halves(num_rows, seed=0)
    assert halves.shape == (num_rows,) and halves.dtype == bool
    first, second = np.flatnonzero(halves), np.flatnonzero(~halves)
    assert first.size == num_rows // 2 and second.size == num_rows - num_rows // 2
    assert np.intersect1d(first, second).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([first, second])), np.arange(num_rows))
    np.testing.assert_array_equal(row_halves(num_rows, seed=0), halves)  # reproducible


def test_row_halves_differ_between_seeds_and_are_not_contiguous_blocks():
    num_rows = 30
    halves = [row_halves(num_rows, seed) for seed in range(3)]
    for a, b in itertools.combinations(halves, 2):
        assert not np.array_equal(a, b) and not np.array_equal(a, ~b)
    # a halving by contiguous blocks would put each task's rows in one half
    row_tasks = _row_tasks(num_tasks=3, per_task=10)
    for mask in halves:
        assert not np.array_equal(mask, np.arange(num_rows) < num_rows // 2)
        assert any(0 < mask[row_tasks == task].sum() < 10 for task in range(3))


def test_claim_splits_draw_one_split_per_seed_starting_with_the_scored_one(monkeypatch):
    corpus = open_corpus("tiny")
    config = ProbeConfig(num_probe_tasks=4, rows_per_task=8, positions_per_row=4, distances=(1,), seed=2)
    probe = probe_rows(corpus, config)
    drawn = []

    def record(networks, inputs, split, seed, settings, progress):
        drawn.append((split, seed, row_halves(split[1].size, seed)))
        return {}

    monkeypatch.setattr(run_module, "split_curves", record)
    out = claim_splits({}, probe, {}, corpus, config, settings=None, progress=False)
    assert out["seeds"] == [2, 3, 4] and [seed for _, seed, _ in drawn] == [2, 3, 4]
    row_tasks = np.asarray(probe.rows["task_id"])
    for split, _, halves in drawn:
        _check_split(split, row_tasks, config.probe_train_fraction)
        assert halves.size == split[1].size and halves.sum() == split[1].size // 2
    for (a, _, ha), (b, _, hb) in itertools.combinations(drawn, 2):
        assert not np.array_equal(a[1], b[1])  # three different probe-test row sets
        assert not np.array_equal(ha, hb)
    # the first is the split every record is scored on
    np.testing.assert_array_equal(drawn[0][0][0], probe.split[0])
    np.testing.assert_array_equal(drawn[0][0][1], probe.split[1])
