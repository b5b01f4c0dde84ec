import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmm_datasets import SampleLayout, get_preset, sample_hmm_params
from hmm_datasets.sampler import ROWS_PER_BLOCK, SamplingTables, cumulative_rows, generate_rows, inverse_cdf


@pytest.fixture(scope="module")
def tiny():
    config = get_preset("tiny", num_train=3 * ROWS_PER_BLOCK + 17)
    params = sample_hmm_params(config)
    return config, params, SamplingTables.from_params(params)


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=37).filter(lambda w: sum(w) > 1e-3),
    u=st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=20),
)
def test_inverse_cdf_matches_searchsorted_and_never_draws_zero_weights(weights, u):
    probs = np.asarray(weights) / np.sum(weights)
    cum = cumulative_rows(probs[None, :])
    assert cum.shape[1] >= len(probs) and cum.shape[1] & (cum.shape[1] - 1) == 0  # a power of two
    u = np.asarray(u)
    drawn = inverse_cdf(cum, np.zeros(len(u), dtype=np.int64), u)
    expected = np.searchsorted(cum[0, : len(probs)], u, side="right")
    np.testing.assert_array_equal(drawn, expected)
    assert np.all(probs[drawn] > 0)


def test_rows_follow_the_data_contract(tiny):
    config, _, tables = tiny
    rows = generate_rows(config, tables, "train", 0, 100)
    layout = SampleLayout.from_config(config)
    length = config.sequence_length
    assert (
        rows["input_ids"].shape == rows["hidden_states"].shape == rows["segment_ids"].shape == (100, length)
    )
    assert rows["input_ids"].dtype == np.int16 and rows["task_id"].dtype == np.int32
    delims = layout.delimiter_mask()
    assert np.all(rows["input_ids"][:, delims] == config.vocab_size)
    assert np.all(rows["hidden_states"][:, delims] == -1)
    assert np.all(rows["input_ids"][:, ~delims] < config.vocab_size)
    assert np.all(
        (rows["hidden_states"][:, ~delims] >= 0) & (rows["hidden_states"][:, ~delims] < config.num_states)
    )
    expected_segments = np.concatenate(
        [
            np.repeat(np.arange(config.num_demos), config.demo_length + 1),
            np.full(config.test_length, config.num_demos),
        ]
    )
    np.testing.assert_array_equal(rows["segment_ids"], np.broadcast_to(expected_segments, (100, length)))
    assert set(np.unique(rows["task_id"])) <= set(range(config.num_tasks))


def test_rows_are_the_same_however_the_split_is_cut(tiny):
    config, _, tables = tiny
    total = config.num_train
    whole = generate_rows(config, tables, "train", 0, total)
    rng = np.random.default_rng(0)
    cuts = np.sort(rng.choice(np.arange(1, total), size=7, replace=False))
    bounds = [0, *cuts.tolist(), total]
    pieces = [generate_rows(config, tables, "train", a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    for name in whole:
        np.testing.assert_array_equal(np.concatenate([p[name] for p in pieces]), whole[name])


def test_splits_and_seeds_give_different_rows(tiny):
    config, _, tables = tiny
    train = generate_rows(config, tables, "train", 0, 50)["input_ids"]
    test = generate_rows(config, tables, "test", 0, 50)["input_ids"]
    other_seed = config.replace(seed=1)
    reseeded = generate_rows(
        other_seed, SamplingTables.from_params(sample_hmm_params(other_seed)), "train", 0, 50
    )
    assert not np.array_equal(train, test)
    assert not np.array_equal(train, reseeded["input_ids"])


def test_out_of_range_rows_are_refused(tiny):
    config, _, tables = tiny
    with pytest.raises(ValueError, match="outside split 'test'"):
        generate_rows(config, tables, "test", 0, config.num_test + 1)


def _empirical_checks(config, params, rows):
    """Counts from sampled rows against the parameters that generated them."""
    tasks = rows["task_id"].astype(np.int64)
    states = rows["hidden_states"].astype(np.int64)
    tokens = rows["input_ids"].astype(np.int64)
    prior_freq = np.bincount(tasks, minlength=config.num_tasks) / len(tasks)
    np.testing.assert_allclose(prior_freq, params.task_prior, atol=0.02)
    # Emissions and transitions of task 0, pooled over positions.
    mine = tasks == 0
    s, t = states[mine], tokens[mine]
    valid = s >= 0
    emission_counts = np.zeros((config.num_states, config.vocab_size))
    np.add.at(emission_counts, (s[valid], t[valid]), 1)
    visited = emission_counts.sum(1) > 400
    emission_freq = emission_counts[visited] / emission_counts[visited].sum(1, keepdims=True)
    np.testing.assert_allclose(emission_freq, params.emissions[0][visited], atol=0.05)
    pairs = (s[:, :-1] >= 0) & (s[:, 1:] >= 0)
    transition_counts = np.zeros((config.num_states, config.num_states))
    np.add.at(transition_counts, (s[:, :-1][pairs], s[:, 1:][pairs]), 1)
    visited = transition_counts.sum(1) > 400
    transition_freq = transition_counts[visited] / transition_counts[visited].sum(1, keepdims=True)
    np.testing.assert_allclose(transition_freq, params.transitions[0][visited], atol=0.05)
    # Each segment starts from the initial distribution.
    starts = SampleLayout.from_config(config).position_in_segment() == 0
    first = np.bincount(s[:, starts].ravel(), minlength=config.num_states) / s[:, starts].size
    np.testing.assert_allclose(first, params.initial[0], atol=0.03)


@pytest.mark.parametrize("rank", [None, 2, 3])  # 3: the tables are padded to width 4
def test_sampled_frequencies_match_the_parameters(rank):
    config = get_preset(
        "tiny", num_tasks=2, num_train=6000, transition_rank=rank, transition_concentration=1.0
    )
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "train", 0, config.num_train)
    _empirical_checks(config, params, rows)


def test_zero_probability_emissions_are_never_sampled():
    config = get_preset("tiny", emission_concentration=0.01, num_train=2000)
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "train", 0, config.num_train)
    states, tokens = rows["hidden_states"].astype(np.int64), rows["input_ids"].astype(np.int64)
    tasks = np.broadcast_to(rows["task_id"][:, None], states.shape).astype(np.int64)
    valid = states >= 0
    assert np.all(params.emissions[tasks[valid], states[valid], tokens[valid]] > 0)
