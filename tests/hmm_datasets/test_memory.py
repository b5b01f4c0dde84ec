"""Lemma 1 measured: memory-L predictors against the full ones, the decay fit."""

import json

import numpy as np
import pytest
import torch

from hmm_datasets import (
    BayesOptimalPredictor,
    HMMMixtureConfig,
    HMMParams,
    SamplingTables,
    generate_rows,
    get_preset,
    sample_hmm_params,
)
from hmm_datasets.memory import (
    bootstrap_interval,
    first_test_token,
    fit_exponential_decay,
    lemma1,
    low_rank_lemma1,
    oracle_tv_on_test,
    rank_correlation,
    scored_positions,
    share_reaching_segment_start,
    tv_by_task,
)
from hmm_datasets.observability import observability_exact
from hmm_datasets.windows import check_memories, position_in_segment

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


# ---- Lemma 1 as stated: per task, the oracle on the test sequences ----------------------------
def test_share_reaching_segment_start_counts_windows_back_to_the_segment_start():
    ids = torch.tensor([[0, 1, 6, 2, 3, 4]])  # delimiter 6: segments 0 1 | 2 3 4
    assert position_in_segment(ids, 6).tolist() == [[0, 1, 2, 0, 1, 2]]
    scored = scored_positions(ids, 6)  # predictions of tokens 1, 2, 3, 4 (offsets 1, 0, 1, 2)
    assert share_reaching_segment_start(ids, scored, 6, 1) == 0.75
    assert share_reaching_segment_start(ids, scored, 6, 2) == 1.0


def test_share_reaching_segment_start_is_at_least_the_row_start_share(result):
    segment, row = result["share_reaching_segment_start"], result["share_reaching_row_start"]
    assert all(s >= r for s, r in zip(segment, row))
    assert segment[0] > 2 * row[0]  # every segment's second token, not the row's only
    assert segment[-1] == 1.0


def test_the_truncated_oracle_is_exact_where_its_window_reaches_the_test_start(tiny):
    config, params, rows = tiny
    predictor = BayesOptimalPredictor(params, device="cpu", dtype=torch.float64)
    ids, tasks = torch.as_tensor(rows["input_ids"]).long(), torch.as_tensor(rows["task_id"]).long()
    start = first_test_token(ids, predictor.delimiter)
    assert start == config.num_demos * (config.demo_length + 1)
    memories = [1, 2, 4, 8]
    full = predictor.oracle_next_token_probs(ids, tasks)
    tv = oracle_tv_on_test(predictor.truncated_oracle_by_memory(ids, tasks, memories), full, start, memories)
    assert tv.shape == (4, 16, config.test_length - 1)
    # equal up to float64 rounding (the window's chains are batched and scheduled otherwise than
    # the full rows', and a product may round by its batch: 1.2e-16 seen on Intel), computed, not set
    for k, memory in enumerate(memories):
        assert float(tv[k, :, :memory].max()) <= 1e-14
        assert float(tv[k, :, memory:].max()) > 1e-6  # beyond, the window forgets something


def test_per_task_records_cover_the_tasks_and_are_strict_json(result, tiny):
    config, params, rows = tiny
    block = result["oracle_per_task"]
    assert block["transition_rank"] is None
    assert block["num_positions_per_row"] == config.test_length - 1
    assert block["share_reaching_segment_start"][:4] == [1 / 15, 2 / 15, 4 / 15, 8 / 15]
    assert block["share_reaching_segment_start"][-1] == 1.0
    assert block["observability_exact"] is True
    tasks = [record["task_id"] for record in block["tasks"]]
    assert tasks == sorted(set(rows["task_id"].tolist()))
    assert sum(record["num_rows"] for record in block["tasks"]) == 16
    exact = observability_exact(params.emissions)
    for record in block["tasks"]:
        assert (
            record["observability"]
            == record["observability_upper"]
            == pytest.approx(exact[record["task_id"]])
        )
        assert len(record["tv"]) == len(MEMORIES)
        assert record["tv"][-1] == 0.0  # L = 52: every window reaches the test start
        assert set(record["fit"]) == {"rate", "C", "r2", "memories"}
    json.dumps(block, allow_nan=False)


def test_per_task_means_weight_every_position_of_the_task_once():
    tv = torch.tensor([[[0.0, 2.0], [4.0, 4.0], [1.0, 1.0]]], dtype=torch.float64)  # [M=1, B=3, P=2]
    tasks, rows, mean = tv_by_task(tv, torch.tensor([5, 2, 5]))
    assert tasks.tolist() == [2, 5] and rows.tolist() == [1, 2]
    assert mean.tolist() == [[4.0], [1.0]]


def blank_hmm(reveal: float, switch: float) -> HMMParams:
    """Two states that swap with probability `switch` / 2 per step; each emits its own token with
    probability `reveal`, else a blank token (2) that says nothing about the state."""
    transitions = np.array([[1 - switch / 2, switch / 2], [switch / 2, 1 - switch / 2]])
    emissions = np.array([[reveal, 0.0, 1 - reveal], [0.0, reveal, 1 - reveal]])
    return HMMParams(np.ones(1), np.full((1, 2), 0.5), transitions[None], emissions[None])


def expected_blank_tv(reveal: float, switch: float, memories, test_length: int) -> list[float]:
    """Mean oracle TV over test positions p = 0..T-2 for `blank_hmm`: where the last reveal is k
    >= L tokens back (probability reveal (1 - reveal)^k), the full oracle knows the state up to
    (1 - switch)^(k + 1) / 2 and the window does not: TV = reveal (1 - switch)^(k + 1) / 2."""
    out = []
    for memory in memories:
        total = sum(
            reveal * (1 - reveal) ** k * reveal * (1 - switch) ** (k + 1) / 2
            for p in range(memory, test_length - 1)
            for k in range(memory, p + 1)
        )
        out.append(total / (test_length - 1))
    return out


def test_the_per_task_rate_of_an_hmm_with_a_known_decay_is_recovered():
    reveal, switch, memories = 0.3, 0.3, [1, 2, 3, 4, 6]
    params = blank_hmm(reveal, switch)
    config = HMMMixtureConfig(
        name="blank", num_tasks=1, num_states=2, vocab_size=3, num_demos=1, demo_length=4,
        test_length=64, num_test=800,
    )  # fmt: skip
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 800)
    record = lemma1(params, rows["input_ids"], rows["task_id"], memories)["oracle_per_task"]["tasks"][0]
    expected = expected_blank_tv(reveal, switch, memories, config.test_length)
    assert record["tv"] == pytest.approx(expected, rel=0.03)
    known = fit_exponential_decay(memories, expected)["rate"]  # about -log((1 - reveal)(1 - switch)) = 0.71
    assert known == pytest.approx(-np.log((1 - reveal) * (1 - switch)), rel=0.05)
    assert record["fit"]["rate"] == pytest.approx(known, rel=0.02)
    assert record["observability"] == pytest.approx(reveal)  # the TV distance of the two emission rows


def test_low_rank_variant_keeps_the_emissions_and_measures_every_task(tiny):
    config, params, _ = tiny
    low = low_rank_lemma1(config, (1, 2, 4), 16, rank=2)
    assert low["transition_rank"] == 2 and low["num_rows"] == 16
    assert low["num_positions_per_row"] == config.test_length - 1
    exact = observability_exact(params.emissions)  # same seed: the same emission draws
    for record in low["tasks"]:
        assert record["observability"] == pytest.approx(exact[record["task_id"]])
    assert sum(record["num_rows"] for record in low["tasks"]) == 16
    json.dumps(low, allow_nan=False)


@pytest.mark.parametrize(
    ("rank", "message"),
    [(0, "rank=0"), (6, "num_states - 1 = 5"), (2.0, "rank=2.0")],
)
def test_bad_low_ranks_say_what_to_use(tiny, rank, message):
    config, _, _ = tiny
    with pytest.raises(ValueError, match=message):
        low_rank_lemma1(config, (1, 2), 4, rank=rank)


def test_low_rank_needs_rows(tiny):
    config, _, _ = tiny
    with pytest.raises(ValueError, match="num_rows=0"):
        low_rank_lemma1(config, (1, 2), 0)


def test_rows_of_different_layouts_are_refused():
    ids = torch.tensor([[0, 6, 1, 2], [0, 1, 6, 2]])
    with pytest.raises(ValueError, match="start at different positions \\[2, 3\\]"):
        first_test_token(ids, 6)
    assert first_test_token(torch.tensor([[0, 1, 2]]), 6) == 0  # no demonstrations: the row is the test


def test_rank_correlation_is_spearmans():
    assert rank_correlation([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert rank_correlation([1, 1, 2], [1, 2, 3]) == pytest.approx(np.sqrt(3) / 2)  # tie: mean rank
    assert rank_correlation([1, 2], [1, 2]) is None
    assert rank_correlation([1, 1, 1], [1, 2, 3]) is None
