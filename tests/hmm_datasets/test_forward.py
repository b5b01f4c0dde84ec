"""The forward recursion's two schedules (one token at a time, and the parallel scan) against
each other and against independent forward algorithms, on long rows, batches and edge cases."""

import numpy as np
import pytest
import torch

from hmm_datasets import BayesOptimalPredictor, HMMParams, forward, get_preset, sample_hmm_params
from tests.hmm_datasets.test_bayes import independent_oracle, random_params


def tables_and_tokens(params, ids, fuse, per_row_hmm=None):
    """The predictor's tables and the recursion's inputs for rows `ids` (mixture form, or one
    HMM per row when `per_row_hmm` names them)."""
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64, fuse=fuse)
    ids = torch.as_tensor(ids)
    tables = predictor.hmms
    if per_row_hmm is None:
        tokens = ids[None]
    else:
        tables, tokens = tables.select(torch.as_tensor(per_row_hmm)), ids[:, None]
    is_delim = tokens == params.vocab_size
    resets = torch.cat([torch.ones_like(is_delim[..., :1]), is_delim[..., :-1]], -1)
    previous = torch.zeros(tables.initial.shape[0], tokens.shape[1], tables.num_features, dtype=torch.float64)
    return tables, tokens.clamp(max=params.vocab_size - 1), resets, previous, is_delim


def edge_rows(vocab, length, rng):
    """A row with scattered delimiters, one of delimiters only, one ending in a delimiter."""
    ids = rng.integers(0, vocab, size=(3, length))
    ids[0, rng.choice(length, size=length // 12, replace=False)] = vocab
    ids[1] = vocab
    ids[2, -1] = vocab
    return ids


SCHEDULES = pytest.mark.parametrize("rank, fuse", [(None, False), (2, True), (2, False)])


@SCHEDULES
@pytest.mark.parametrize("per_row", [False, True], ids=["mixture", "one-hmm-per-row"])
def test_the_scan_equals_the_sequential_recursion(rank, fuse, per_row):
    params = random_params(num_tasks=3, num_states=4, vocab=3, rank=rank, seed=7)
    ids = edge_rows(params.vocab_size, 300, np.random.default_rng(1))
    tables, tokens, resets, previous, is_delim = tables_and_tokens(
        params, ids, fuse, [0, 2, 1] if per_row else None
    )
    slow = forward.sequential(tables, tokens, resets, previous)
    fast = forward.scan(tables, tokens, resets, previous)
    delimiter = is_delim.expand(slow[1].shape)  # what a filter holds there is never read
    torch.testing.assert_close(fast[1][~delimiter], slow[1][~delimiter], atol=1e-12, rtol=0)
    torch.testing.assert_close(fast[0][~delimiter], slow[0][~delimiter], atol=1e-12, rtol=0)


@SCHEDULES
def test_the_scan_continues_a_block_and_starts_a_window(rank, fuse):
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
        fast = forward.scan(tables, tokens, resets, previous, given)
        torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)


def test_the_scan_follows_sparse_hmms_over_4096_tokens():
    """The `small` preset's HMMs (Dirichlet 0.03: many probabilities below 1e-100)."""
    params = sample_hmm_params(get_preset("small", num_tasks=4))
    ids = sample_row(params, 0, 4096, np.random.default_rng(0))[None]
    tables, tokens, resets, previous, _ = tables_and_tokens(params, ids, False, [0])
    slow = forward.sequential(tables, tokens, resets, previous)
    fast = forward.scan(tables, tokens, resets, previous)
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
    tables, tokens, resets, previous, _ = tables_and_tokens(params, ids, False, [0])
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


@SCHEDULES
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
