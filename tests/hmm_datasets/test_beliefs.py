"""The exact beliefs of the mixture against brute-force enumeration over hidden paths."""

import itertools

import numpy as np
import pytest
import torch

from hmm_datasets import beliefs as beliefs_module
from hmm_datasets import cache
from hmm_datasets.bayes import state_filters
from hmm_datasets.beliefs import BELIEFS, belief_states, belief_tasks
from tests.hmm_datasets.test_bayes import random_params, sequence_probability


def brute_force_filter(params, task, segment):
    """P(state of the last token | task, the segment's tokens), summing over hidden paths."""
    weights = np.zeros(params.num_states)
    for path in itertools.product(range(params.num_states), repeat=len(segment)):
        p = params.initial[task, path[0]] * params.emissions[task, path[0], segment[0]]
        for prev, state, token in zip(path[:-1], path[1:], segment[1:]):
            p *= params.transitions[task, prev, state] * params.emissions[task, state, token]
        weights[path[-1]] += p
    return weights / weights.sum()


def rows_with_delimiters(params, seed=1):
    rng = np.random.default_rng(seed)
    delimiter = params.vocab_size
    ids = rng.integers(0, params.vocab_size, size=(4, 9))
    ids[:, [3, 6]] = delimiter  # three segments of two tokens each... and the last of two
    return ids, rng.integers(0, params.num_tasks, size=4)


@pytest.mark.parametrize("rank", [None, 2])
def test_state_filter_equals_brute_force_and_resets_at_delimiters(rank):
    params = random_params(num_tasks=3, num_states=3, vocab=3, rank=rank)
    ids, tasks = rows_with_delimiters(params)
    filters = state_filters(params, ids, tasks, device="cpu").numpy()
    for row, task in enumerate(tasks):
        start = 0
        for i, token in enumerate(ids[row]):
            if token == params.vocab_size:
                assert np.all(filters[row, i] == 0)
                start = i + 1
                continue
            expected = brute_force_filter(params, task, list(ids[row, start : i + 1]))
            np.testing.assert_allclose(filters[row, i], expected, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_beliefs_are_distributions_and_the_joint_factorises(dtype):
    params = random_params(num_tasks=3, num_states=3, vocab=3)
    ids, tasks = rows_with_delimiters(params)
    positions = np.broadcast_to(np.array([0, 2, 4, 8]), (ids.shape[0], 4))
    beliefs = belief_states(params, ids, tasks, positions, device="cpu", dtype=dtype)
    task, state, joint = (beliefs[name] for name in ("task_posterior", "state_filter", "joint_posterior"))
    assert task.shape == (4, 4, 3) and state.shape == (4, 4, 3) and joint.shape == (4, 4, 9)
    for belief in (task, state, joint):
        np.testing.assert_allclose(belief.sum(-1), 1, atol=1e-6)
    by_task = joint.reshape(4, 4, 3, 3)
    np.testing.assert_allclose(by_task.sum(-1), task, atol=1e-6)  # the joint's task marginal
    own = by_task[np.arange(4), :, tasks] / task[np.arange(4), :, tasks][..., None]
    np.testing.assert_allclose(own, state, atol=1e-5)  # conditioned on the row's task: its filter
    # the task posterior by Bayes' rule over whole prefixes, brute force
    for row in range(4):
        for p, i in enumerate(positions[row]):
            likelihood = np.array(
                [sequence_probability(params, k, list(ids[row, : i + 1])) for k in range(3)]
            )
            expected = params.task_prior * likelihood / (params.task_prior * likelihood).sum()
            np.testing.assert_allclose(task[row, p], expected, atol=1e-6)


def test_many_tasks_keep_the_chosen_ones_and_the_rest_as_one_entry():
    params = random_params(num_tasks=5, num_states=2, vocab=3)
    ids, tasks = rows_with_delimiters(params)
    positions = np.broadcast_to(np.array([1, 5]), (ids.shape[0], 2))
    assert belief_tasks(params, [0, 1], max_tasks=5) is None
    kept = belief_tasks(params, [0, 1], max_tasks=4)
    full = belief_states(params, ids, tasks, positions, device="cpu")
    cut = belief_states(params, ids, tasks, positions, kept_tasks=kept, device="cpu")
    np.testing.assert_allclose(cut["task_posterior"][..., :2], full["task_posterior"][..., :2], atol=1e-6)
    np.testing.assert_allclose(
        cut["task_posterior"][..., 2], full["task_posterior"][..., 2:].sum(-1), atol=1e-6
    )
    assert cut["joint_posterior"].shape[-1] == 2 * 2 + 1
    np.testing.assert_allclose(cut["joint_posterior"].sum(-1), 1, atol=1e-6)


def test_float32_beliefs_are_within_float32_rounding_of_float64_ones():
    """Rows of 120 tokens, 40 tasks kept as 3 and a remainder: the float32 filters' beliefs
    against float64's, entry by entry (measured: 3e-7 at most) and as the floored logs
    `probing.belief` regresses on (3e-6)."""
    params = random_params(num_tasks=40, num_states=4, vocab=5, seed=3)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, params.vocab_size, size=(6, 120))
    ids[:, 30::30] = params.vocab_size
    tasks = rng.integers(0, params.num_tasks, size=6)
    positions = np.broadcast_to(np.arange(0, 120, 7), (6, 18))
    kept = belief_tasks(params, [0, 1, 2], max_tasks=8)
    wide, narrow = (
        belief_states(params, ids, tasks, positions, kept, device="cpu", dtype=dtype)
        for dtype in (torch.float64, torch.float32)
    )
    for name in BELIEFS:
        assert np.abs(narrow[name] - wide[name]).max() < 2e-6, name
        logs = [np.log(np.maximum(b[name], 1e-6)) for b in (wide, narrow)]
        assert np.abs(logs[0] - logs[1]).max() < 1e-4, name


def test_cached_beliefs_equal_the_computed_ones_and_are_computed_once(monkeypatch, tmp_path):
    cache.clear()
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    params = random_params(num_tasks=5, num_states=2, vocab=3)
    ids, tasks = rows_with_delimiters(params)
    positions = np.broadcast_to(np.array([1, 5]), (ids.shape[0], 2))
    calls, compute = [], beliefs_module.belief_states
    monkeypatch.setattr(beliefs_module, "belief_states", lambda *a, **k: calls.append(1) or compute(*a, **k))
    expected = compute(params, ids, tasks, positions, device="cpu")
    first = beliefs_module.cached_belief_states(params, ids, tasks, positions, device="cpu")
    first["task_posterior"][:] = -1  # a caller's change stays its own
    again = beliefs_module.cached_belief_states(params, ids.copy(), tasks, positions, device="cpu")
    assert len(calls) == 1
    for name in BELIEFS:
        np.testing.assert_array_equal(again[name], expected[name])
    cache.clear()  # another process of the study: read from the shared folder
    read = beliefs_module.cached_belief_states(params, ids, tasks, positions, device="cpu")
    assert len(calls) == 1 and all(np.array_equal(read[n], expected[n]) for n in BELIEFS)
    # what the beliefs depend on besides the rows: tasks, positions, kept tasks
    beliefs_module.cached_belief_states(params, ids, (tasks + 1) % 5, positions, device="cpu")
    beliefs_module.cached_belief_states(params, ids, tasks, positions + 1, device="cpu")
    cut = beliefs_module.cached_belief_states(params, ids, tasks, positions, kept_tasks=[0, 1], device="cpu")
    assert len(calls) == 4 and cut["task_posterior"].shape[-1] == 3
    beliefs_module.cached_belief_states(params, ids, tasks, positions, device="cpu", dtype=torch.float64)
    assert len(calls) == 5  # and the precision
    cache.clear()
