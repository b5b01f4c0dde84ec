"""The forward recursion's three schedules (batched steps, a compiled loop, a parallel scan)
against each other and against independent forward algorithms, on long rows, batches and edge
cases; the oracle's rows grouped by task; the schedule the cost model picks."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from hmm_datasets import BayesOptimalPredictor, HMMParams, forward, get_preset, sample_hmm_params
from hmm_datasets.bayes import task_grid
from tests.hmm_datasets.test_bayes import independent_oracle, random_params


def tables_and_tokens(params, ids, fuse, layout=None):
    """The predictor's tables and the recursion's inputs for rows `ids`: the mixture form, or
    `layout = (hmms, grid)`, HMM hmms[m] reading the rows grid[m] (one per HMM, or grouped)."""
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64, fuse=fuse)
    ids = torch.as_tensor(ids)
    tables = predictor.hmms
    if layout is None:
        tokens = ids[None]
    else:
        tables, tokens = tables.select(torch.as_tensor(layout[0])), ids[torch.as_tensor(layout[1])]
    is_delim = tokens == params.vocab_size
    resets = torch.cat([torch.ones_like(is_delim[..., :1]), is_delim[..., :-1]], -1)
    previous = torch.zeros(tables.initial.shape[0], tokens.shape[1], tables.num_features, dtype=torch.float64)
    return tables, tokens.clamp(max=params.vocab_size - 1), resets, previous, is_delim


ONE_ROW = ([0], [[0]])
LAYOUTS = {  # three rows: every HMM reads them; HMM m reads row m; rows grouped by HMM
    "mixture": None,
    "one-hmm-per-row": ([0, 2, 1], [[0], [1], [2]]),
    "grouped": ([0, 2], [[0, 1], [2, 0]]),
}


def edge_rows(vocab, length, rng):
    """A row with scattered delimiters, one of delimiters only, one ending in a delimiter."""
    ids = rng.integers(0, vocab, size=(3, length))
    ids[0, rng.choice(length, size=length // 12, replace=False)] = vocab
    ids[1] = vocab
    ids[2, -1] = vocab
    return ids


TABLES = pytest.mark.parametrize("rank, fuse", [(None, False), (2, True), (2, False)])
FAST = pytest.mark.parametrize("schedule", [forward.scan, forward.compiled], ids=["scan", "compiled"])


@FAST
@TABLES
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_fast_schedules_equal_the_sequential_recursion(schedule, rank, fuse, layout):
    params = random_params(num_tasks=3, num_states=4, vocab=3, rank=rank, seed=7)
    ids = edge_rows(params.vocab_size, 300, np.random.default_rng(1))
    tables, tokens, resets, previous, is_delim = tables_and_tokens(params, ids, fuse, LAYOUTS[layout])
    slow = forward.sequential(tables, tokens, resets, previous)
    fast = schedule(tables, tokens, resets, previous)
    delimiter = is_delim.expand(slow[1].shape)  # what a filter holds there is never read
    torch.testing.assert_close(fast[1][~delimiter], slow[1][~delimiter], atol=1e-12, rtol=0)
    torch.testing.assert_close(fast[0][~delimiter], slow[0][~delimiter], atol=1e-12, rtol=0)


@FAST
@TABLES
def test_the_fast_schedules_continue_a_block_and_start_a_window(schedule, rank, fuse):
    """From the features a previous block left, and from a given first distribution (a window
    that starts inside a segment)."""
    params = random_params(num_tasks=2, num_states=4, vocab=3, rank=rank, seed=2)
    ids = np.random.default_rng(3).integers(0, 3, size=(2, 200))
    tables, tokens, resets, _, _ = tables_and_tokens(params, ids, fuse)
    resets[:] = False
    rng = np.random.default_rng(4)
    previous = torch.as_tensor(rng.dirichlet(np.ones(tables.num_features), size=(2, 2)))
    first = (
        torch.as_tensor(rng.dirichlet(np.ones(tables.num_features), size=(2, 2))),
        torch.rand(2, 2).double(),
    )
    for given in (None, first):
        slow = forward.sequential(tables, tokens, resets, previous, given)
        fast = schedule(tables, tokens, resets, previous, given)
        torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)


@pytest.mark.parametrize("length", [2, 3, 6, 9])
def test_the_scan_on_short_rows_of_a_large_vocabulary(length):
    """Fewer token pairs than a table of every pair would hold: the pairs are composed one by
    one, with segment starts among them."""
    params = random_params(num_tasks=2, num_states=3, vocab=9, rank=None, seed=8)
    ids = np.random.default_rng(9).integers(0, 10, size=(1, length))
    tables, tokens, resets, previous, is_delim = tables_and_tokens(params, ids, False, ONE_ROW)
    slow = forward.sequential(tables, tokens, resets, previous)
    fast = forward.scan(tables, tokens, resets, previous)
    delimiter = is_delim.expand(slow[1].shape)
    torch.testing.assert_close(fast[1][~delimiter], slow[1][~delimiter], atol=1e-12, rtol=0)
    torch.testing.assert_close(fast[0][~delimiter], slow[0][~delimiter], atol=1e-12, rtol=0)


@FAST
def test_the_fast_schedules_follow_sparse_hmms_over_4096_tokens(schedule):
    """The `small` preset's HMMs (Dirichlet 0.03: many probabilities below 1e-100)."""
    params = sample_hmm_params(get_preset("small", num_tasks=4))
    ids = sample_row(params, 0, 4096, np.random.default_rng(0))[None]
    tables, tokens, resets, previous, _ = tables_and_tokens(params, ids, False, ONE_ROW)
    slow = forward.sequential(tables, tokens, resets, previous)
    fast = schedule(tables, tokens, resets, previous)
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)


def test_the_scan_stays_exact_when_its_row_scales_drift_thousands_of_nats_apart():
    """Two absorbing states, one emitting uniformly, one mostly token 0, reading uniform
    tokens: over 4,096 tokens the two start states' likelihoods differ by far more than a
    float64 exponent (the products' row scales underflow if taken together)."""
    uniform, peaked = np.full(3, 1 / 3), np.array([0.998, 0.001, 0.001])
    params = HMMParams(
        np.ones(1),
        np.array([[0.5, 0.5]]),
        np.eye(2)[None],
        np.stack([uniform, peaked])[None],
    )
    ids = np.random.default_rng(1).integers(0, 3, size=(1, 4096))
    drift = np.log(uniform[ids[0]]).sum() - np.log(peaked[ids[0]]).sum()
    assert drift > 10_000  # nats: exp(-drift / 8) is already 0 in float64
    tables, tokens, resets, previous, _ = tables_and_tokens(params, ids, False, ONE_ROW)
    slow = forward.sequential(tables, tokens, resets, previous)
    fast = forward.scan(tables, tokens, resets, previous)
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)


def test_composing_scaled_matrices_is_exact_when_the_scales_underflow():
    """Row i of the product is sum_j N1[i, j] exp(r2[j]) N2[j]: with r2 thousands of nats apart
    a row that reaches only the small scales keeps its distribution."""
    n1 = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.5, 1.0]]], dtype=torch.float64).expand(1, 1, 2, 3)
    n1 = torch.cat([n1, torch.tensor([[[[0.0, 0.0, 1.0]]]], dtype=torch.float64)], dim=2)  # [1, 1, 3, 3]
    n2 = torch.tensor([[[[1.0, 0.2, 0.0], [0.0, 1.0, 0.3], [0.4, 0.0, 1.0]]]], dtype=torch.float64)
    r1 = torch.zeros(1, 1, 3, dtype=torch.float64)
    r2 = torch.tensor([[[0.0, -2000.0, -2001.0]]], dtype=torch.float64)
    flags = torch.zeros(1, 1, dtype=torch.bool)
    _, r, n = forward._compose((flags, r1, n1), (flags, r2, n2))
    with np.errstate(divide="ignore"):  # log 0 = -inf: a path that is not there
        for i in range(3):  # the exact row in log space
            terms = [
                np.log(n1[0, 0, i, j].item()) + r2[0, 0, j].item() + np.log(n2[0, 0, j].numpy())
                for j in range(3)
            ]
            log_row = np.logaddexp.reduce(np.array(terms), axis=0)
            np.testing.assert_allclose(n[0, 0, i].numpy(), np.exp(log_row - log_row.max()), rtol=1e-12)
            np.testing.assert_allclose(r[0, 0, i].item(), log_row.max(), rtol=1e-12)


def sample_row(params, task, length, rng):
    state = rng.choice(params.num_states, p=params.initial[task])
    row = []
    for _ in range(length):
        row.append(rng.choice(params.vocab_size, p=params.emissions[task, state]))
        state = rng.choice(params.num_states, p=params.transitions[task, state])
    return np.array(row)


def independent_mixture(params, row):
    """The mixture's next-token distributions by per-task forward algorithms (`independent_oracle`)
    and the posterior they imply, in float64 NumPy."""
    per_task = np.stack([independent_oracle(params, k, row) for k in range(params.num_tasks)])  # [K, L, V+1]
    token_probs = np.concatenate(
        [np.einsum("ks,ksv->kv", params.initial, params.emissions)[:, None], per_task[:, :-1, :-1]], 1
    )
    delimiter = params.vocab_size
    observed = np.minimum(row, delimiter - 1)
    likelihood = token_probs[:, np.arange(len(row)), observed]
    log_w = np.log(params.task_prior)[:, None] + np.cumsum(
        np.log(np.where(row == delimiter, 1.0, likelihood)), 1
    )
    weights = np.exp(log_w - log_w.max(0))
    weights /= weights.sum(0)
    return np.einsum("kl,klv->lv", weights, per_task)


@TABLES
def test_the_predictor_on_one_row_of_4096_tokens_equals_independent_forward_algorithms(rank, fuse):
    params = random_params(num_tasks=3, num_states=4, vocab=4, rank=rank, seed=11)
    rng = np.random.default_rng(12)
    ids = sample_row(params, 1, 4096, rng)
    ids[rng.choice(4096, size=30, replace=False)] = params.vocab_size
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64, fuse=fuse)
    oracle = predictor.oracle_next_token_probs(ids[None], [1])[0].numpy()
    np.testing.assert_allclose(oracle, independent_oracle(params, 1, ids), atol=1e-12)
    mixture = predictor.next_token_probs(ids[None])[0].numpy()
    np.testing.assert_allclose(mixture, independent_mixture(params, ids), atol=1e-10)


@pytest.mark.parametrize("padding", ["token", "delimiter"])
def test_a_batch_mixing_lengths_with_padding_predicts_each_row_as_alone(padding):
    """Rows of 3 to 700 tokens padded to one length: every prediction inside a row equals the
    row's own, whichever schedule the batch takes."""
    params = random_params(num_tasks=3, num_states=4, vocab=3, rank=2, seed=5)
    rng = np.random.default_rng(6)
    lengths = [700, 3, 150, 41]
    rows = [edge_rows(params.vocab_size, n, rng)[0] for n in lengths]
    fill = 0 if padding == "token" else params.vocab_size
    batch = np.full((len(rows), max(lengths)), fill)
    for r, row in enumerate(rows):
        batch[r, : len(row)] = row
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    tasks = np.array([0, 2, 1, 0])
    together = predictor.next_token_probs(batch).numpy()
    together_oracle = predictor.oracle_next_token_probs(batch, tasks).numpy()
    for r, row in enumerate(rows):
        n = len(row)
        alone = predictor.next_token_probs(row[None])[0].numpy()
        alone_oracle = predictor.oracle_next_token_probs(row[None], tasks[r : r + 1])[0].numpy()
        # the last prediction of a row looks past its end, into the padding
        np.testing.assert_allclose(together[r, : n - 1], alone[:-1], atol=1e-12)
        np.testing.assert_allclose(together_oracle[r, : n - 1], alone_oracle[:-1], atol=1e-12)


@pytest.mark.parametrize(
    "tasks",
    [[3, 1, 3, 3, 0, 1, 3, 3, 3, 3], [5], [2, 2, 2], list(range(7)), [0] * 40 + [1, 2, 3]],
    ids=["uneven", "one-row", "one-task", "a-task-per-row", "one-large-task"],
)
def test_the_oracle_grid_holds_each_row_once_under_its_task(tasks):
    tasks = torch.tensor(tasks)
    group_tasks, grid, slot = task_grid(tasks)
    assert torch.equal(grid.flatten()[slot], torch.arange(len(tasks)))
    assert torch.equal(tasks[grid], group_tasks[:, None].expand_as(grid))
    assert grid.numel() <= 2 * len(tasks) + len(set(tasks.tolist()))  # padding stays bounded


def test_the_cost_model_picks_a_loop_for_few_chains_and_batched_steps_for_many():
    tables = BayesOptimalPredictor(sample_hmm_params(get_preset("small")), device="cpu").hmms

    def cheapest(chains, length, device_tables=tables):
        costs = forward.schedule_costs(device_tables, chains, length, budget_floats=2**28)
        return min(costs, key=costs.get)

    assert cheapest(1, 4096) == "compiled"
    assert cheapest(32 * 512, 16) == "sequential"  # the mixture of `small` on 512 rows
    tiny_call = forward.schedule_costs(tables, chains=2, length=30, budget_floats=2**28)
    assert "compiled" not in tiny_call  # not worth loading the loop for
    on_a_gpu = dataclasses.replace(tables, right=tables.right.to("meta"))  # no compiled loop there
    assert cheapest(1, 4096, on_a_gpu) == "scan"
    assert cheapest(32 * 512, 16, on_a_gpu) == "sequential"


def test_the_compiled_loop_leaves_the_thread_setting_alone():
    """numba's OpenMP layer sets the process's OpenMP threads (torch's too) when it starts: a
    process told to use one thread must still use one after the loop ran."""
    code = """
import torch
torch.set_num_threads(1)
import hmm_datasets
from hmm_datasets import forward
tables = hmm_datasets.BayesOptimalPredictor(
    hmm_datasets.sample_hmm_params(hmm_datasets.get_preset("tiny")), device="cpu"
).hmms
tokens, resets = torch.zeros(1, 2, 30, dtype=torch.long), torch.zeros(1, 2, 30, dtype=torch.bool)
resets[..., 0] = True
forward.compiled(tables, tokens, resets, torch.zeros(tables.initial.shape[0], 2, tables.num_features))
print(torch.get_num_threads())
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "2"}
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert ran.stdout.split()[-1] == "1"
