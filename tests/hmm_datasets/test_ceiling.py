"""The Bayes-optimal and oracle accuracy table of a corpus (the dataset card's)."""

import pytest

from hmm_datasets import BayesOptimalPredictor, SampleLayout, get_preset, sample_hmm_params
from hmm_datasets.ceiling import accuracy_table, format_accuracy_table
from hmm_datasets.predictors import IN_CONTEXT
from hmm_datasets.sampler import SamplingTables, generate_rows


@pytest.fixture(scope="module")
def table():
    config = get_preset("tiny", num_test=256)
    params = sample_hmm_params(config)
    rows = generate_rows(config, SamplingTables.from_params(params), "test", 0, 256)
    predictor = BayesOptimalPredictor(params, device="cpu")
    return accuracy_table(
        predictor, rows["input_ids"], rows["task_id"], SampleLayout.from_config(config), progress=False
    )


def test_oracle_is_never_worse_than_bayes_and_demonstrations_help(table):
    rows = table["by_num_demos"]
    assert [row["num_demos"] for row in rows] == [0, 1, 2, 4]
    for row in rows:
        assert row["oracle_nll"] <= row["bayes_nll"] + 1e-9  # the oracle knows more
    nll = [row["bayes_nll"] for row in rows]
    assert all(a >= b - 1e-9 for a, b in zip(nll, nll[1:])), nll
    assert rows[0]["bayes_early_accuracy"] < rows[-1]["bayes_early_accuracy"]
    assert rows[-1]["bayes_oracle_argmax_agreement"] > rows[0]["bayes_oracle_argmax_agreement"]
    assert len(table["by_test_position"]["bayes_accuracy"]) == 16


def test_true_task_posterior_grows_with_demonstrations(table):
    identified = table["true_task_posterior_after_demo"]
    assert len(identified) == 4 and 1 / 8 < identified[0] < identified[-1] <= 1


def test_table_prints(table):
    text = format_accuracy_table(table)
    assert "demos   bayes  oracle" in text and "by test position" in text and "true task" in text
    first = table["by_num_demos"][0]
    assert f"    0  {first['bayes_accuracy']:>6.3f}  {first['oracle_accuracy']:>6.3f}" in text


def test_the_in_context_ladder_sits_below_bayes_with_all_demonstrations(table):
    ladder = table["ladder"]
    rungs = {rung["name"]: rung["accuracy"] for rung in ladder["rungs"]}
    assert set(rungs) == {*IN_CONTEXT, "bayes", "oracle"}
    assert rungs["bayes"] == pytest.approx(table["by_num_demos"][-1]["bayes_accuracy"])
    assert rungs["bayes"] > max(rungs[name] for name in IN_CONTEXT)  # no HMM knowledge, lower
    assert list(rungs.values()) == sorted(rungs.values())  # as measured
    text = format_accuracy_table(table)
    assert "the ladder, all 4 demonstrations" in text and "PPM-C blending, order 3" in text
