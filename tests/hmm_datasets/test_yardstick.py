import numpy as np
import pytest
import torch

from hmm_datasets import BayesOptimalPredictor, SampleLayout, get_preset, keep_last_demos, sample_hmm_params
from hmm_datasets.sampler import SamplingTables, generate_rows
from hmm_datasets.yardstick import accuracy_table, demo_counts_for, format_accuracy_table, score_test_tokens


def test_demo_counts_are_powers_of_two_up_to_n():
    assert demo_counts_for(0) == [0]
    assert demo_counts_for(1) == [0, 1]
    assert demo_counts_for(8) == [0, 1, 2, 4, 8]
    assert demo_counts_for(6) == [0, 1, 2, 4, 6]


def test_layout_positions():
    layout = SampleLayout(num_demos=2, demo_length=3, test_length=4)
    assert layout.sequence_length == 12 and layout.test_start == 8
    np.testing.assert_array_equal(layout.segment_ids(), [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    np.testing.assert_array_equal(layout.delimiter_mask().nonzero()[0], [3, 7])
    np.testing.assert_array_equal(layout.test_prediction_positions(), [7, 8, 9, 10])
    # A test segment longer than a demonstration has no delimiter inside it.
    assert not SampleLayout(1, 2, 10).delimiter_mask()[3:].any()


def test_keep_last_demos_gives_a_row_of_the_smaller_layout():
    layout = SampleLayout(num_demos=3, demo_length=2, test_length=2)
    row = np.arange(layout.sequence_length)[None]
    np.testing.assert_array_equal(keep_last_demos(row, layout, 1), [[6, 7, 8, 9, 10]])
    assert keep_last_demos(row, layout, 0).shape == (1, 2)
    with pytest.raises(ValueError, match="num_demos=4 must be between 0 and 3"):
        keep_last_demos(row, layout, 4)


def test_scores_of_a_predictor_that_knows_the_next_token_are_perfect():
    layout = SampleLayout(num_demos=2, demo_length=3, test_length=4)
    rng = np.random.default_rng(0)
    ids = torch.as_tensor(rng.integers(0, 5, size=(3, layout.sequence_length)))
    probs = torch.zeros(3, layout.sequence_length, 6)
    probs[:, :-1] = torch.nn.functional.one_hot(ids[:, 1:], 6).float()
    scores = score_test_tokens(probs, ids, layout)
    assert np.all(scores["correct"] == 1) and np.allclose(scores["nll"], 0)
    no_demos = score_test_tokens(
        probs[:, layout.test_start :], ids[:, layout.test_start :], layout.with_demos(0)
    )
    assert np.isnan(no_demos["correct"][:, 0]).all() and np.all(no_demos["correct"][:, 1:] == 1)


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
        assert 0 <= row["bayes_accuracy"] <= 1
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
    assert len(text.splitlines()) > 8
