"""What the probes predict lines up with the positions of the rows."""

import numpy as np
import pytest

from hmm_datasets.corpus import open_corpus
from probing import position_labels, previous_token_labels
from probing.labels import split_rows


@pytest.mark.parametrize("distance", [1, 3, 7])
def test_distance_k_labels_are_the_input_shifted_by_k_inside_segments(distance, layout):
    ids = np.random.default_rng(1).integers(0, 6, size=(3, layout.sequence_length))
    labels = previous_token_labels(ids, layout, distance)
    valid = labels >= 0
    rows, columns = np.nonzero(valid)
    np.testing.assert_array_equal(labels[rows, columns], ids[rows, columns - distance])
    in_segment = layout.position_in_segment()
    observation = ~layout.delimiter_mask()
    np.testing.assert_array_equal(valid[0], (in_segment >= distance) & observation)
    per_row = layout.num_demos * (layout.demo_length - distance) + layout.test_length - distance
    assert valid.sum(1).tolist() == [per_row] * 3


@pytest.mark.parametrize("distance", [0, 8, 9])
def test_distances_outside_a_demonstration_are_refused(distance, layout):
    with pytest.raises(ValueError, match="distance"):
        previous_token_labels(np.zeros((1, layout.sequence_length), dtype=int), layout, distance)


def test_labels_need_the_corpus_columns_and_align_with_the_rows():
    corpus = open_corpus("tiny")
    rows = corpus.splits["test"].select(range(4)).with_format("numpy")[:]
    labels = position_labels(rows, corpus.layout, [1, 2])
    np.testing.assert_array_equal(labels["hidden_state"], rows["hidden_states"])
    assert (labels["task"][:, ~corpus.layout.delimiter_mask()] == rows["task_id"][:, None]).all()
    assert (labels["task"][:, corpus.layout.delimiter_mask()] == -1).all()
    with pytest.raises(ValueError, match="hidden_states"):
        position_labels({"input_ids": rows["input_ids"], "task_id": rows["task_id"]}, corpus.layout, [1])


def test_probe_rows_split_into_disjoint_train_and_test_rows_of_every_task():
    tasks = np.repeat(np.arange(5), 8)
    train, test = split_rows(tasks, 0.75, seed=0)
    assert np.intersect1d(train, test).size == 0  # held-out rows stay held out
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(tasks.size))
    assert all(
        np.bincount(tasks[part], minlength=5).tolist() == [n] * 5 for part, n in ((train, 6), (test, 2))
    )
    with pytest.raises(ValueError, match="leaves its probe-train or probe-test set empty"):
        split_rows(tasks, 1.0, seed=0)
