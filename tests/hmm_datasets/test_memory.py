"""Lemma 1 measured: memory-L predictors against the full ones, the decay fit."""

import json

import numpy as np
import pytest
import torch

from hmm_datasets import SamplingTables, generate_rows, get_preset, sample_hmm_params
from hmm_datasets.memory import (
    bootstrap_interval,
    check_memories,
    fit_exponential_decay,
    lemma1,
    scored_positions,
)

MEMORIES = (1, 2, 4, 8, 52)  # 52: the tiny rows' whole length


@pytest.fixture(scope="module")
def tiny():
    config = get_preset("tiny")
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 16)
    return config, params, rows


@pytest.fixture(scope="module")
def result(tiny):
    _, params, rows = tiny
    return lemma1(params, rows["input_ids"], rows["task_id"], MEMORIES)


def test_keys_are_present_and_the_result_is_strict_json(result, tiny):
    config, _, _ = tiny
    assert result["memories"] == list(MEMORIES)
    assert result["num_rows"] == 16
    # every position but the last and those before the 4 delimiters
    assert result["num_positions"] == 16 * (config.sequence_length - 1 - config.num_demos)
    for name in ("mixture", "oracle"):
        curve = result[name]
        for key in ("tv", "tv_ci_low", "tv_ci_high", "agreement", "accuracy"):
            assert len(curve[key]) == len(MEMORIES), key
        assert set(curve["fit"]) == {"rate", "C", "r2", "memories"}
        assert 0 <= curve["full_accuracy"] <= 1
    json.dumps(result, allow_nan=False)


@pytest.mark.parametrize("name", ["mixture", "oracle"])
def test_memory_brings_the_predictor_to_the_full_one(result, name):
    curve = result[name]
    assert curve["tv"][-2] <= curve["tv"][0]  # L = 8 at most as far as L = 1
    assert curve["tv"][-1] == 0.0  # the window is the whole row: the full predictor itself
    assert curve["agreement"][-1] == 1.0
    assert curve["accuracy"][-1] == curve["full_accuracy"]
    assert curve["fit"]["memories"] == [1, 2, 4, 8]  # zero TV is left out of the fit
    assert curve["fit"]["rate"] > 0
    for tv, low, high in zip(curve["tv"], curve["tv_ci_low"], curve["tv_ci_high"]):
        assert low <= tv <= high


def test_one_token_is_not_enough_even_for_the_oracle(result):
    assert result["oracle"]["tv"][0] > 0.01
    assert result["mixture"]["tv"][0] > result["oracle"]["tv"][0]  # the mixture also forgets the task


def test_share_reaching_row_start_counts_positions_below_the_memory(result):
    shares = result["share_reaching_row_start"]
    assert shares[-1] == 1.0
    assert shares[0] == pytest.approx(1 / (result["num_positions"] / result["num_rows"]))  # position 0 only
    assert np.all(np.diff(shares) > 0)


def test_fit_recovers_an_exact_exponential_and_skips_zeros():
    memories = [1, 2, 4, 8, 16]
    tv = [3.0 * np.exp(-0.5 * m) for m in memories[:-1]] + [0.0]
    fit = fit_exponential_decay(memories, tv)
    assert fit["rate"] == pytest.approx(0.5)
    assert fit["C"] == pytest.approx(3.0)
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["memories"] == [1, 2, 4, 8]
    assert fit_exponential_decay([1, 2], [0.1, 0.0])["rate"] is None  # one point fits nothing


def test_bootstrap_interval_brackets_the_mean_and_shrinks_with_more_rows():
    rng = np.random.default_rng(0)
    mask = torch.ones(400, 10, dtype=torch.bool)
    values = torch.as_tensor(rng.random((400, 10)))
    low, high = bootstrap_interval(values, mask)
    assert low < float(values.mean()) < high
    few_low, few_high = bootstrap_interval(values[:25], mask[:25])
    assert few_high - few_low > high - low


def test_scored_positions_skip_predictions_of_delimiters():
    ids = torch.tensor([[0, 1, 6, 2, 3]])  # delimiter 6
    assert scored_positions(ids, 6).tolist() == [[True, False, True, True]]


@pytest.mark.parametrize(
    ("memories", "message"),
    [
        ([], "memories is empty"),
        ([1, 0], "contains 0"),
        ([2, 4, 2], "contains 2 twice"),
        ([1.5], "contains 1.5"),
    ],
)
def test_bad_memories_name_the_value(memories, message, tiny):
    _, params, rows = tiny
    with pytest.raises(ValueError, match=message):
        check_memories(memories)
    with pytest.raises(ValueError, match=message):
        lemma1(params, rows["input_ids"], rows["task_id"], memories)
