"""What the probes predict lines up with the positions of the rows."""

import numpy as np
import pytest

from hmm_datasets import SampleLayout, get_preset, sample_hmm_params
from hmm_datasets.corpus import open_corpus
from probing import position_labels, previous_token_labels
from probing.labels import (
    PREVIOUS_TOKEN_FLOOR,
    TOKEN_BLOCKS,
    check_floor_free_of_label,
    probe_tasks,
    sample_positions,
    split_rows,
    token_blocks,
    token_features,
)


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


def token_rows(layout, vocab, rows, seed=0):
    """Random rows with the delimiter `vocab` where the layout puts it."""
    ids = np.random.default_rng(seed).integers(0, vocab, size=(rows, layout.sequence_length))
    ids[:, layout.delimiter_mask()] = vocab
    return ids


def test_token_features_have_one_block_per_kind_of_local_information(layout):
    vocab = 6
    ids = token_rows(layout, vocab, rows=5)
    positions = sample_positions(layout, 5, 10, seed=0)
    features = token_features(ids, positions, layout, vocab)
    width = (vocab + 1) + (vocab + 2) + (layout.num_demos + 1) + layout.test_length + vocab
    assert features.shape == (5, 10, width) and features.dtype == np.float32
    np.testing.assert_allclose(features[..., -vocab:].sum(-1), 1.0, rtol=1e-6)  # observation positions
    assert (features[..., :-vocab].sum(-1) == 4).all()  # four one-hot blocks
    short_test = SampleLayout(layout.num_demos, layout.demo_length, test_length=2)  # offsets 0..n
    assert token_features(token_rows(short_test, vocab, 1), np.array([[0]]), short_test, vocab).shape[-1] == (
        width - layout.test_length + layout.demo_length + 1
    )
    with pytest.raises(ValueError, match="vocab_size=5"):
        token_features(ids, positions, layout, vocab - 1)


def test_token_features_of_a_hand_checked_row():
    layout = SampleLayout(num_demos=2, demo_length=3, test_length=5)  # offsets 0..4
    vocab = 5  # observations 0..4, delimiter 5
    ids = np.array([[1, 4, 1, 5, 0, 2, 2, 5, 3, 3, 0, 4, 3]])
    positions = np.array([[0, 2, 3, 4, 7, 12]])
    blocks = np.split(token_features(ids, positions, layout, vocab)[0], np.cumsum([6, 7, 3, 5]), -1)
    current, previous, segment, offset = (block.argmax(-1).tolist() for block in blocks[:4])
    assert current == [1, 1, 5, 0, 5, 3]
    assert previous == [6, 4, 1, 5, 2, 4]  # 6: "none" at position 0; 5: the delimiter
    assert segment == [0, 0, 0, 1, 1, 2]  # the delimiter at 3 ends demonstration 0
    assert offset == [0, 2, 3, 0, 3, 4]
    assert all((block.sum(-1) == 1).all() for block in blocks[:4])  # one-hot
    expected = [
        [0, 1, 0, 0, 0],
        [0, 2 / 3, 0, 0, 1 / 3],
        [0, 2 / 3, 0, 0, 1 / 3],  # the delimiter sees its demonstration, and is not counted
        [1, 0, 0, 0, 0],  # a new segment: the bag starts afresh
        [1 / 3, 0, 2 / 3, 0, 0],
        [1 / 5, 0, 0, 3 / 5, 1 / 5],
    ]
    np.testing.assert_allclose(blocks[4], expected, rtol=1e-6)


def test_token_bags_reset_at_every_segment_start(layout):
    vocab = 6
    ids = token_rows(layout, vocab, rows=3, seed=2)
    starts = np.flatnonzero(layout.position_in_segment() == 0)
    positions = np.broadcast_to(starts, (3, starts.size))
    bag = token_features(ids, positions, layout, vocab)[..., -vocab:]
    np.testing.assert_array_equal(bag, np.eye(vocab, dtype=np.float32)[ids[:, starts]])  # the token alone


def test_the_previous_token_at_row_position_zero_is_none(layout):
    vocab = 6
    ids = token_rows(layout, vocab, rows=4, seed=3)
    positions = np.tile([0, 1], (4, 1))
    previous = token_features(ids, positions, layout, vocab)[..., vocab + 1 : 2 * vocab + 3]
    assert (previous[:, 0].argmax(-1) == vocab + 1).all()  # "none"
    np.testing.assert_array_equal(previous[:, 1].argmax(-1), ids[:, 0])


def test_token_features_with_blocks_are_the_named_blocks_concatenated(layout):
    vocab = 6
    ids = token_rows(layout, vocab, rows=4, seed=4)
    positions = sample_positions(layout, 4, 12, seed=1)
    every = token_features(ids, positions, layout, vocab)
    widths = {"current_token": 7, "previous_token": 8, "segment": 5, "offset": 16, "segment_bag": 6}
    parts = dict(zip(TOKEN_BLOCKS, np.split(every, np.cumsum([widths[n] for n in TOKEN_BLOCKS])[:-1], -1)))
    np.testing.assert_array_equal(token_features(ids, positions, layout, vocab, TOKEN_BLOCKS), every)
    blocks = token_blocks(ids, positions, layout, vocab)
    assert list(blocks) == list(TOKEN_BLOCKS)  # the default: all, in the order of `every`
    for name in TOKEN_BLOCKS:
        np.testing.assert_array_equal(blocks[name], parts[name])
    for named in (PREVIOUS_TOKEN_FLOOR, ("segment_bag", "current_token"), ("offset",)):
        chosen = token_features(ids, positions, layout, vocab, named)
        np.testing.assert_array_equal(chosen, np.concatenate([parts[n] for n in named], -1))
        assert chosen.dtype == np.float32
    for bad in (("previous",), ("offset", "offset"), ()):
        with pytest.raises(ValueError, match="blocks="):
            token_features(ids, positions, layout, vocab, bad)


def tiny_rows_at_every_position():
    """The tiny corpus's test rows, every position of them, with their blocks and labels."""
    corpus = open_corpus("tiny")
    rows = corpus.splits["test"].with_format("numpy")[:]
    positions = sample_positions(corpus.layout, len(rows["task_id"]), None, seed=0)
    labels = position_labels(rows, corpus.layout, range(1, corpus.layout.demo_length))
    at = {name: np.take_along_axis(label, positions, 1) for name, label in labels.items()}
    return token_blocks(rows["input_ids"], positions, corpus.layout, corpus.config.vocab_size), at


def test_the_floor_guard_refuses_a_block_holding_the_label():
    blocks, labels = tiny_rows_at_every_position()
    with pytest.raises(
        ValueError, match="'previous_token' holds the label of previous_token_1.*must not contain"
    ):
        check_floor_free_of_label(blocks, labels["previous_token_1"], "previous_token_1")
    for distance in range(1, 6):  # the previous-token probes' floor holds no token d back
        target = f"previous_token_{distance}"
        check_floor_free_of_label(
            {name: blocks[name] for name in PREVIOUS_TOKEN_FLOOR}, labels[target], target
        )
    check_floor_free_of_label(
        blocks, labels["previous_token_2"], "previous_token_2"
    )  # no block is the 2-back
    # only labelled positions count: a block that is the label there and anything elsewhere
    label = labels["previous_token_3"]
    planted = np.eye(7, dtype=np.float32)[np.where(label >= 0, label, 6)]
    with pytest.raises(ValueError, match="'planted' holds the label of previous_token_3"):
        check_floor_free_of_label({"planted": planted}, label, "previous_token_3")
    check_floor_free_of_label(
        {"planted": planted}, np.full_like(label, -1), "previous_token_3"
    )  # nothing labelled


def test_the_probes_cover_the_first_tasks_and_at_most_every_task():
    params = sample_hmm_params(get_preset("tiny"))  # 8 HMMs
    assert probe_tasks(params, 3).tolist() == [0, 1, 2]
    assert probe_tasks(params, 16).tolist() == list(range(8))
