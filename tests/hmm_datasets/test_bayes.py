"""The Bayes-optimal predictor against brute-force enumeration over hidden paths."""

import itertools
import math

import numpy as np
import pytest
import torch

import hmm_datasets
from hmm_datasets import BayesOptimalPredictor, HMMParams, SampleLayout, get_preset, sample_hmm_params
from hmm_datasets.bayes import _weights, oracle_state_estimates
from hmm_datasets.sampler import SamplingTables, generate_rows


def random_params(num_tasks=3, num_states=3, vocab=3, rank=None, seed=0) -> HMMParams:
    """Dense float64 parameters: every sequence has positive probability."""
    rng = np.random.default_rng(seed)

    def rows(*shape):
        return rng.dirichlet(np.ones(shape[-1]), size=shape[:-1])

    left = right = None
    if rank is None:
        transitions = rows(num_tasks, num_states, num_states)
    else:
        left, right = rows(num_tasks, num_states, rank), rows(num_tasks, rank, num_states)
        transitions = left @ right
    prior = rng.dirichlet(np.ones(num_tasks))
    return HMMParams(
        prior, rows(num_tasks, num_states), transitions, rows(num_tasks, num_states, vocab), left, right
    )


def segment_probability(params, task, tokens, start=None):
    """P(tokens | task) for one segment, summing over every hidden path."""
    if not tokens:
        return 1.0
    start = params.initial[task] if start is None else start
    total = 0.0
    for path in itertools.product(range(params.num_states), repeat=len(tokens)):
        p = start[path[0]] * params.emissions[task, path[0], tokens[0]]
        for prev, state, token in zip(path[:-1], path[1:], tokens[1:]):
            p *= params.transitions[task, prev, state] * params.emissions[task, state, token]
        total += p
    return total


def sequence_probability(params, task, tokens, start=None):
    """P(tokens | task) for a sequence with delimiters (each resets the state)."""
    delim = params.vocab_size
    segments, current = [], []
    for token in tokens:
        if token == delim:
            segments.append(current)
            current = []
        else:
            current.append(token)
    segments.append(current)
    p = segment_probability(params, task, segments[0], start)
    for segment in segments[1:]:
        p *= segment_probability(params, task, segment)
    return p


def brute_force_next_token(params, tokens, next_is_delim, starts=None, prior=None):
    """P(next | tokens) of the mixture; `starts[k]` is task k's state distribution at tokens[0],
    `prior` the task prior (default the mixture's; one-hot: the oracle of that task)."""
    prior = params.task_prior if prior is None else prior
    out = np.zeros(params.vocab_size + 1)
    if next_is_delim:
        out[-1] = 1.0
        return out
    for v in range(params.vocab_size):
        out[v] = sum(
            prior[k]
            * sequence_probability(params, k, list(tokens) + [v], None if starts is None else starts[k])
            for k in range(params.num_tasks)
        )
    return out / out.sum()


def layout_rows(params, layout, num_rows, seed=0):
    """Arbitrary observation tokens with delimiters where the layout puts them."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, params.vocab_size, size=(num_rows, layout.sequence_length))
    rows[:, layout.delimiter_mask()] = params.vocab_size
    return rows


LAYOUT = SampleLayout(num_demos=2, demo_length=2, test_length=3)  # L = 9
# the d x d feature-step recursion, and the fallback through the states
FUSE = pytest.mark.parametrize("fuse", [True, False], ids=["fused", "states"])


def exact(params, fuse=True):
    return BayesOptimalPredictor(params, dtype=torch.float64, device="cpu", fuse=fuse)


@FUSE
@pytest.mark.parametrize("rank", [None, 2])
def test_mixture_equals_brute_force_enumeration(rank, fuse):
    params = random_params(rank=rank)
    rows = layout_rows(params, LAYOUT, 3, seed=rank or 0)
    probs = exact(params, fuse).next_token_probs(rows).numpy()
    delims = LAYOUT.delimiter_mask()
    for r, row in enumerate(rows):
        for i in range(len(row)):
            next_is_delim = i + 1 < len(row) and delims[i + 1]
            expected = brute_force_next_token(params, row[: i + 1], next_is_delim)
            np.testing.assert_allclose(probs[r, i], expected, atol=1e-9, rtol=0)


@FUSE
def test_task_posterior_equals_brute_force(fuse):
    params = random_params(num_tasks=4, num_states=2)
    rows = layout_rows(params, LAYOUT, 2)
    posterior = exact(params, fuse).task_posterior(rows).numpy()
    for r, row in enumerate(rows):
        for i in range(len(row)):
            joint = np.array(
                [params.task_prior[k] * sequence_probability(params, k, list(row[: i + 1])) for k in range(4)]
            )
            np.testing.assert_allclose(posterior[r, i], joint / joint.sum(), atol=1e-9, rtol=0)


@FUSE
def test_the_posterior_and_the_states_alone_are_the_filter_s_own(fuse):
    """Asked for the task posterior or the oracle's states alone, the filter makes no prediction
    and gives the very values it gives beside them (the predictions never feed the recursion)."""
    params = random_params(rank=2)
    rows = layout_rows(params, LAYOUT, 5, seed=3)
    predictor = exact(params, fuse)
    assert torch.equal(
        predictor.task_posterior(rows), predictor.predict(rows, return_task_posterior=True).task_posterior
    )
    ids, tasks = predictor._as_ids(rows), torch.tensor([0, 1, 2, 0, 1])
    beside = predictor._oracle_filter(ids, tasks, want_states=True)
    alone = predictor._oracle_filter(ids, tasks, want_states=True, want_probs=False)
    assert alone.probs is None and beside.probs is not None
    assert torch.equal(alone.states, beside.states)
    assert torch.equal(predictor.oracle_state_filters(rows, tasks), beside.states)


def independent_oracle(params, task, row):
    """Per-task forward algorithm, unnormalised alphas with a running log scale."""
    delim = params.vocab_size
    out = np.zeros((len(row), params.vocab_size + 1))
    alpha = params.initial[task].copy()  # P(state at t | tokens before t), per segment
    for t, token in enumerate(row):
        if t > 0:
            if token == delim:
                out[t - 1, -1] = 1
            else:
                out[t - 1, :-1] = alpha @ params.emissions[task]
        if token == delim:
            alpha = params.initial[task].copy()
            continue
        alpha = alpha * params.emissions[task][:, token]
        alpha = (alpha / alpha.sum()) @ params.transitions[task]
    out[-1, :-1] = alpha @ params.emissions[task]
    return out


@FUSE
@pytest.mark.parametrize("rank", [None, 3])
def test_oracle_equals_an_independent_forward_algorithm(rank, fuse):
    params = random_params(num_tasks=5, num_states=4, vocab=4, rank=rank)
    layout = SampleLayout(num_demos=3, demo_length=5, test_length=20)
    rows = layout_rows(params, layout, 6)
    tasks = np.array([0, 1, 2, 3, 4, 2])
    probs = exact(params, fuse).oracle_next_token_probs(rows, tasks)
    for r in range(len(rows)):
        np.testing.assert_allclose(
            probs[r].numpy(), independent_oracle(params, tasks[r], rows[r]), atol=1e-12
        )


def test_single_task_mixture_is_its_oracle():
    params = random_params(num_tasks=1, num_states=4, vocab=3)
    rows = layout_rows(params, SampleLayout(2, 4, 10), 4)
    predictor = exact(params)
    np.testing.assert_allclose(
        predictor.next_token_probs(rows).numpy(),
        predictor.oracle_next_token_probs(rows, np.zeros(4, dtype=int)).numpy(),
        atol=1e-12,
    )


def state_marginal(params, task, offset):
    dist = params.initial[task]
    for _ in range(offset):
        dist = dist @ params.transitions[task]
    return dist


@FUSE
@pytest.mark.parametrize(("memory", "rank"), [(1, None), (2, None), (3, None), (2, 1), (4, 2)])
def test_truncated_memory_equals_brute_force_on_the_window(memory, rank, fuse):
    params = random_params(num_tasks=3, num_states=2, rank=rank)
    rows = layout_rows(params, LAYOUT, 2, seed=memory)
    probs = exact(params, fuse).truncated_next_token_probs(rows, memory).numpy()
    delims = LAYOUT.delimiter_mask()
    offsets = LAYOUT.position_in_segment()
    for r, row in enumerate(rows):
        for i in range(len(row)):
            lo = max(0, i - memory + 1)
            starts = [state_marginal(params, k, offsets[lo]) for k in range(params.num_tasks)]
            expected = brute_force_next_token(
                params, row[lo : i + 1], i + 1 < len(row) and delims[i + 1], starts
            )
            np.testing.assert_allclose(probs[r, i], expected, atol=1e-9, rtol=0)


@FUSE
@pytest.mark.parametrize(("memory", "rank"), [(1, None), (2, None), (4, None), (3, 2)])
def test_truncated_oracle_equals_brute_force_on_the_window(memory, rank, fuse):
    params = random_params(num_tasks=3, num_states=3, rank=rank, seed=memory)
    rows = layout_rows(params, LAYOUT, 3, seed=memory)
    tasks = np.array([2, 0, 1])
    probs = exact(params, fuse).truncated_oracle_next_token_probs(rows, tasks, memory).numpy()
    delims = LAYOUT.delimiter_mask()
    offsets = LAYOUT.position_in_segment()
    for r, row in enumerate(rows):
        task = tasks[r]
        for i in range(len(row)):
            lo = max(0, i - memory + 1)
            starts = [state_marginal(params, k, offsets[lo]) for k in range(params.num_tasks)]
            expected = brute_force_next_token(
                params, row[lo : i + 1], i + 1 < len(row) and delims[i + 1], starts, np.eye(3)[task]
            )
            np.testing.assert_allclose(probs[r, i], expected, atol=1e-9, rtol=0)


def test_truncated_oracle_with_the_whole_row_in_memory_is_the_oracle():
    params = random_params(num_tasks=4, num_states=3, vocab=4)
    rows = layout_rows(params, LAYOUT, 5)
    tasks = np.array([3, 1, 0, 2, 3])
    predictor = exact(params)
    oracle = predictor.oracle_next_token_probs(rows, tasks)
    for memory in (LAYOUT.sequence_length, LAYOUT.sequence_length + 7):
        torch.testing.assert_close(predictor.truncated_oracle_next_token_probs(rows, tasks, memory), oracle)
    # one token short: only the last position loses the first token, and only there may they differ
    short = predictor.truncated_oracle_next_token_probs(rows, tasks, LAYOUT.sequence_length - 1)
    torch.testing.assert_close(short[:, :-1], oracle[:, :-1])


@pytest.mark.parametrize(
    "block_floats", [None, 900, 200], ids=["one-block", "3-token-blocks", "1-token-blocks"]
)
def test_predictions_after_some_positions_are_those_after_every_position(monkeypatch, block_floats):
    """The filter asked for the predictions after a few positions only (where the fixed-memory
    windows end) gives what it gives after every position, there: the mixture's and the
    oracle's, from a window's start state, over one block of tokens or several; the positions
    must increase."""
    if block_floats is not None:
        monkeypatch.setattr(hmm_datasets.bayes, "BLOCK_FLOATS", block_floats)
    params = random_params(num_tasks=3, num_states=3, vocab=3, seed=4)
    rows = torch.as_tensor(layout_rows(params, LAYOUT, 4, seed=4))
    predictor = exact(params)
    noise = torch.rand(3, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    starts = noise / noise.sum(-1, keepdim=True)  # [K, R, S]: each task's state at each row's first token
    tasks = torch.tensor([2, 0, 1, 2])
    at = [0, 2, 3, 8]  # a delimiter at 2 (the next token opens a segment), none after 8
    for every, some in (
        (
            predictor._mixture_filter(rows, False, start_states=starts),
            predictor._mixture_filter(rows, False, start_states=starts, predict_at=at),
        ),
        (
            predictor._oracle_filter(rows, tasks, start_states=starts[tasks, torch.arange(4)]),
            predictor._oracle_filter(rows, tasks, start_states=starts[tasks, torch.arange(4)], predict_at=at),
        ),
    ):
        assert some.probs.shape == (4, len(at), params.vocab_size + 1)
        torch.testing.assert_close(some.probs, every.probs[:, at], rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="must be increasing positions in 0..8"):
        predictor._mixture_filter(rows, False, predict_at=[3, 2])


@pytest.fixture(scope="module")
def tiny_rows():
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 64)
    return config, params, rows


def test_truncated_memory_approaches_the_full_predictor(tiny_rows):
    """Lemma 1: the error of an L-memory predictor falls as L grows, and vanishes at L >= length."""
    config, params, rows = tiny_rows
    predictor = exact(params)
    full = predictor.next_token_probs(rows["input_ids"])
    errors = []
    for memory in (1, 2, 4, 8, 16):
        truncated = predictor.truncated_next_token_probs(rows["input_ids"], memory)
        errors.append(0.5 * (truncated - full).abs().sum(-1).mean().item())
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    same = predictor.truncated_next_token_probs(rows["input_ids"], config.sequence_length)
    torch.testing.assert_close(same, full)


def test_probabilities_sum_to_one_with_point_masses_before_delimiters(tiny_rows):
    config, params, rows = tiny_rows
    predictor = BayesOptimalPredictor(params, device="cpu")
    layout = SampleLayout.from_config(config)
    before_delim = np.roll(layout.delimiter_mask(), -1)
    before_delim[-1] = False
    for probs in (
        predictor.next_token_probs(rows["input_ids"]),
        predictor.oracle_next_token_probs(rows["input_ids"], rows["task_id"]),
        predictor.truncated_next_token_probs(rows["input_ids"], 5),
        predictor.truncated_oracle_next_token_probs(rows["input_ids"], rows["task_id"], 5),
    ):
        assert probs.shape == (64, config.sequence_length, config.vocab_size + 1)
        torch.testing.assert_close(probs.sum(-1), torch.ones(64, config.sequence_length))
        assert torch.all(probs[:, before_delim, -1] == 1)
        assert torch.all(probs[:, ~before_delim, -1] == 0)


def test_task_posterior_concentrates_on_the_true_task_as_demonstrations_grow():
    # Concentration 0.5: tasks are distinguishable, but not from a single demonstration.
    config = get_preset(
        "tiny", num_demos=8, emission_concentration=0.5, transition_concentration=0.5, num_test=256
    )
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 256)
    posterior = BayesOptimalPredictor(params, device="cpu").task_posterior(rows["input_ids"]).numpy()
    demo_ends = [(m + 1) * (config.demo_length + 1) - 1 for m in range(config.num_demos)]
    true_task = posterior[np.arange(256), :, rows["task_id"]]  # [B, L]
    means = true_task[:, demo_ends].mean(0)
    assert 1 / config.num_tasks < means[0] < 0.7
    assert means[-1] > 0.95
    assert np.all(np.diff(means) > 0), means
    np.testing.assert_allclose(posterior.sum(-1), 1.0, atol=1e-5)


def test_float32_agrees_with_float64_and_chunking_changes_nothing(tiny_rows):
    _, params, rows = tiny_rows
    reference = exact(params).next_token_probs(rows["input_ids"])
    fast = BayesOptimalPredictor(params, device="cpu").next_token_probs(rows["input_ids"])
    chunked = BayesOptimalPredictor(params, device="cpu", memory_budget_bytes=1)  # one row per chunk
    torch.testing.assert_close(fast.double(), reference, atol=1e-5, rtol=0)
    torch.testing.assert_close(chunked.next_token_probs(rows["input_ids"]), fast, atol=1e-6, rtol=0)


def test_feature_step_tables_are_used_for_low_rank_hmms_that_fit():
    dense = sample_hmm_params(get_preset("tiny"))
    low_rank = sample_hmm_params(get_preset("tiny", transition_rank=2))
    assert BayesOptimalPredictor(dense).hmms.feature_step is None  # d = S: nothing to gain
    assert BayesOptimalPredictor(low_rank).hmms.feature_step.shape == (8, 6, 2, 2)
    assert BayesOptimalPredictor(low_rank, memory_budget_bytes=1).hmms.feature_step is None


def test_very_long_sequences_stay_finite_and_normalised():
    params = sample_hmm_params(get_preset("tiny", emission_concentration=0.05))
    predictor = BayesOptimalPredictor(params, device="cpu")
    config = get_preset("tiny", test_length=5000, num_demos=0, num_test=2)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 2)
    probs = predictor.next_token_probs(rows["input_ids"])
    assert torch.isfinite(probs).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 5000))


def test_bad_inputs_say_what_is_wrong(tiny_rows):
    _, params, rows = tiny_rows
    predictor = BayesOptimalPredictor(params, device="cpu")
    with pytest.raises(ValueError, match="input_ids must lie in 0..6"):
        predictor.next_token_probs(np.full((1, 5), 9))
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        predictor.next_token_probs(np.zeros(5, dtype=int))
    with pytest.raises(ValueError, match="task_ids has 2 entries for 64 rows"):
        predictor.oracle_next_token_probs(rows["input_ids"], [0, 1])
    with pytest.raises(ValueError, match="task_ids must lie in 0..7"):
        predictor.oracle_next_token_probs(rows["input_ids"][:1], [8])
    with pytest.raises(ValueError, match="memories contains 0"):
        predictor.truncated_next_token_probs(rows["input_ids"], 0)
    with pytest.raises(ValueError, match=r"memories contains 2\.5: every memory must be an integer >= 1"):
        predictor.truncated_oracle_next_token_probs(rows["input_ids"], rows["task_id"], 2.5)
    with pytest.raises(ValueError, match="task_ids has 1 entries for 64 rows"):
        predictor.truncated_oracle_next_token_probs(rows["input_ids"], [0], 3)
    with pytest.raises(ValueError, match="task_ids must lie in 0..7"):
        predictor.truncated_oracle_next_token_probs(rows["input_ids"][:1], [-1], 3)
    with pytest.raises(ValueError, match="memories is empty"):
        predictor.truncated_by_memory(rows["input_ids"], [])
    with pytest.raises(ValueError, match="memories contains 0"):
        predictor.truncated_oracle_by_memory(rows["input_ids"], rows["task_id"], [2, 0])


def test_oracle_state_estimates_match_a_direct_forward_pass():
    params = hmm_datasets.load_hmm_params(hmm_datasets.get_preset("tiny"))
    corpus = hmm_datasets.open_corpus("tiny")
    rows = corpus.splits["test"].select(range(3)).with_format("numpy")[:]
    estimates = oracle_state_estimates(params, rows["input_ids"], rows["task_id"], device="cpu")
    delimiter = params.vocab_size
    for row, task in enumerate(rows["task_id"]):
        belief = params.initial[task]
        for t, token in enumerate(rows["input_ids"][row]):
            if token == delimiter:
                assert estimates[row, t] == -1
                belief = params.initial[task]
                continue
            posterior = belief * params.emissions[task][:, token]
            assert estimates[row, t] == np.argmax(posterior)
            belief = (posterior / posterior.sum()) @ params.transitions[task]


@pytest.mark.parametrize("rank, fuse", [(None, False), (2, True), (2, False)])
def test_the_oracle_state_filter_and_its_predictions_come_from_one_recursion(rank, fuse):
    """On a row of 1,024 tokens with delimiters, a row of delimiters only and one ending in a
    delimiter: the oracle's next-token distribution is its filtered state pushed one step, and the
    filter restarts at `initial` after every delimiter."""
    params = random_params(num_tasks=4, num_states=4, vocab=3, rank=rank, seed=3)
    rng = np.random.default_rng(5)
    delimiter = params.vocab_size
    ids = rng.integers(0, delimiter, size=(3, 1024))
    ids[0, rng.choice(1024, size=80, replace=False)] = delimiter
    ids[1] = delimiter
    ids[2, -1] = delimiter
    tasks = np.array([0, 3, 1])
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64, fuse=fuse)
    states = predictor.oracle_state_filters(ids, tasks).numpy()
    probs = predictor.oracle_next_token_probs(ids, tasks).numpy()
    at_delimiter = ids == delimiter
    assert np.all(states[at_delimiter] == 0)
    np.testing.assert_allclose(states[~at_delimiter].sum(-1), 1, atol=1e-12)
    before = np.where(
        at_delimiter[..., None], params.initial[tasks][:, None], states
    )  # the next token's start
    pushed = np.einsum("bls,bst,btv->blv", before, params.transitions[tasks], params.emissions[tasks])
    pushed[at_delimiter] = np.einsum("bs,bsv->bv", params.initial[tasks], params.emissions[tasks])[
        np.nonzero(at_delimiter)[0]
    ]
    next_is_observation = np.concatenate([ids[:, 1:] != delimiter, np.ones((3, 1), bool)], axis=1)
    np.testing.assert_allclose(
        probs[..., :delimiter][next_is_observation], pushed[next_is_observation], atol=1e-12
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_posterior_weights_are_the_exponentials_above_the_floor_and_zero_at_or_below_it(dtype):
    """The weights skip the exponential's slow path (of -inf, or of a subnormal result) and stay
    what exp of the thresholded log-weights gives, bit for bit."""
    floor = 0.5 * math.log(torch.finfo(dtype).tiny)
    log_w = -torch.rand(5, 40, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    log_w = (log_w * 3 * abs(floor)).to(dtype)
    log_w[:, 0] = 0.0  # the maximum is 0
    log_w[0, 1, :4] = -math.inf
    log_w[1, 2, :3] = floor
    log_w[1, 3, :3] = torch.nextafter(torch.tensor(floor, dtype=dtype), torch.tensor(0.0, dtype=dtype))
    expected = torch.exp(torch.where(log_w > floor, log_w, -math.inf))
    expected /= expected.sum(1, keepdim=True)
    weights = _weights(log_w.clone(), dim=1)
    assert torch.equal(weights, expected)
    assert (weights[1, 2, :3] == 0).all() and (weights[1, 3, :3] > 0).all()
