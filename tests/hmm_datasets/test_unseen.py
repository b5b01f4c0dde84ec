"""The test_unseen split: rows of fresh HMMs from the mixture's prior, none of them in the mixture,
and the task-diversity presets that carry it."""

import json
import shutil

import numpy as np
import pytest
from datasets import load_dataset, load_dataset_builder

import hmm_datasets
from hmm_datasets import corpus as corpus_module
from hmm_datasets.names import MANIFEST_FILENAME, UNSEEN_PARAMS_FILENAME
from hmm_datasets.params import (
    UNSEEN_SEED_KEY,
    HMMParams,
    check_disjoint,
    sample_hmm_params,
    unseen_task_params,
)

UNSEEN = 16
CONTRACT_SPLITS = ("train", "validation", "test")


def _config(**overrides):
    return hmm_datasets.get_preset("tiny", **{"num_test_unseen": UNSEEN, **overrides})


def _columns(dataset):
    return {name: np.asarray(dataset[name]) for name in dataset.column_names}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The tiny corpus exported without and with the split: {0: folder, UNSEEN: folder}."""
    root = tmp_path_factory.mktemp("unseen")
    folders = {}
    for count in (0, UNSEEN):
        folders[count] = root / f"tiny-{count}"
        config = hmm_datasets.get_preset("tiny", num_test_unseen=count)
        hmm_datasets.export_corpus(config, folders[count], table_rows=0, progress=False)
    return folders


# ---- the unseen HMMs ---------------------------------------------------------------------------
def test_unseen_hmms_come_from_the_same_prior_on_their_own_stream():
    config = _config()
    mixture, unseen = sample_hmm_params(config), unseen_task_params(config)
    assert (unseen.num_tasks, unseen.num_states, unseen.vocab_size) == (UNSEEN, 6, 6)
    np.testing.assert_array_equal(unseen.task_prior, np.full(UNSEEN, 1 / UNSEEN, dtype=np.float32))
    again = sample_hmm_params(config, UNSEEN, stream=(UNSEEN_SEED_KEY,))
    np.testing.assert_array_equal(unseen.emissions, again.emissions)  # deterministic in the seed
    for name in ("initial", "transitions", "emissions"):  # no unseen HMM is any mixture HMM
        ours, theirs = getattr(unseen, name), getattr(mixture, name)
        assert not any(np.array_equal(ours[u], theirs[k]) for u in range(UNSEEN) for k in range(8)), name
    check_disjoint(mixture, unseen)
    np.testing.assert_array_equal(hmm_datasets.sample_hmm_params(config).emissions, mixture.emissions)


def test_unseen_hmms_keep_the_transition_rank_and_none_without_the_split():
    unseen = unseen_task_params(_config(transition_rank=2))
    assert unseen.transition_rank == 2 and unseen.transition_left.shape == (UNSEEN, 6, 2)
    assert unseen_task_params(hmm_datasets.get_preset("tiny")) is None


def test_check_disjoint_raises_on_a_planted_copy():
    config = _config()
    mixture, unseen = sample_hmm_params(config), unseen_task_params(config)
    arrays = {name: getattr(unseen, name).copy() for name in ("initial", "transitions", "emissions")}
    for name, array in arrays.items():
        array[3] = getattr(mixture, name)[5]
    planted = HMMParams(unseen.task_prior, arrays["initial"], arrays["transitions"], arrays["emissions"])
    with pytest.raises(ValueError, match="unseen HMM 3 equals HMM 5 of the mixture"):
        check_disjoint(mixture, planted)
    arrays["emissions"][3] = unseen.emissions[3]  # same start, other emissions: not the same HMM
    check_disjoint(mixture, HMMParams(unseen.task_prior, *arrays.values()))
    with pytest.raises(ValueError, match="the unseen HMMs have S=5, V=6 but the mixture's S=6"):
        check_disjoint(mixture, unseen_task_params(_config(num_states=5)))


@pytest.mark.parametrize(
    ("value", "message"),
    [(-1, "num_test_unseen=-1 must be >= 0"), (2.5, "num_test_unseen=2.5 must be an integer")],
)
def test_a_bad_count_names_the_field(value, message):
    with pytest.raises(ValueError, match=message):
        hmm_datasets.get_preset("tiny", num_test_unseen=value)
    with pytest.raises(ValueError, match=message):
        load_dataset_builder("hmm_mixture", "tiny", num_test_unseen=value)


# ---- the rows ----------------------------------------------------------------------------------
def test_unseen_rows_follow_the_data_contract():
    config = _config()
    ds = load_dataset("hmm_mixture", "tiny", num_test_unseen=UNSEEN)
    assert list(ds) == [*CONTRACT_SPLITS, "test_unseen"]
    assert ds["test_unseen"].features == hmm_datasets.corpus_features(config)
    rows = _columns(ds["test_unseen"])
    layout = hmm_datasets.SampleLayout.from_config(config)
    ids, states, tasks = rows["input_ids"], rows["hidden_states"], rows["task_id"]
    assert ids.shape == (UNSEEN, config.sequence_length)
    delimiters = layout.delimiter_mask()
    assert np.all((ids == config.delimiter) == delimiters)  # delimiters where the layout puts them
    assert np.all((states == -1) == delimiters)  # hidden states -1 exactly there
    np.testing.assert_array_equal(rows["segment_ids"], np.broadcast_to(layout.segment_ids(), ids.shape))
    assert tasks.min() >= 0 and tasks.max() < UNSEEN and len(np.unique(tasks)) > 1
    unseen = hmm_datasets.load_unseen_params(config)
    emitted = ~delimiters[None, :].repeat(UNSEEN, 0)
    task_at = np.broadcast_to(tasks[:, None], ids.shape)
    probability = unseen.emissions[task_at[emitted], states[emitted], ids[emitted]]
    assert np.all(probability > 0)  # each token emitted by the named unseen HMM at its state
    expected = hmm_datasets.generate_rows(
        config, hmm_datasets.tables_for_split(config, "test_unseen"), "test_unseen", 0, UNSEEN
    )
    for name, column in rows.items():
        np.testing.assert_array_equal(column, expected[name])


def test_the_other_splits_are_byte_identical_with_and_without_the_unseen_split(exported):
    without = load_dataset("hmm_mixture", "tiny")
    with_unseen = load_dataset("hmm_mixture", "tiny", num_test_unseen=UNSEEN)
    for split in CONTRACT_SPLITS:
        a, b = _columns(without[split]), _columns(with_unseen[split])
        for name in a:
            assert a[name].tobytes() == b[name].tobytes(), (split, name)
    manifests = {count: json.loads((exported[count] / MANIFEST_FILENAME).read_text()) for count in exported}
    shards = [name for name in manifests[0]["files"] if name.startswith("data/")]
    assert len(shards) == 3
    for name in shards:  # the exported Parquet shards too, to the byte
        assert manifests[0]["files"][name] == manifests[UNSEEN]["files"][name], name


# ---- export and opening -----------------------------------------------------------------------
def test_an_exported_folder_keeps_the_unseen_parameters(exported):
    folder, config = exported[UNSEEN], _config()
    manifest = json.loads((folder / MANIFEST_FILENAME).read_text())["files"]
    assert UNSEEN_PARAMS_FILENAME in manifest and "data/test_unseen-00000-of-00001.parquet" in manifest
    corpus = hmm_datasets.open_corpus(str(folder))
    regenerated = unseen_task_params(config)
    for params in (hmm_datasets.load_unseen_params(folder), corpus.unseen_params):
        for name in ("task_prior", "initial", "transitions", "emissions"):
            np.testing.assert_array_equal(getattr(params, name), getattr(regenerated, name))
    np.testing.assert_array_equal(corpus.params.emissions, sample_hmm_params(config).emissions)
    assert corpus.split("test_unseen").num_rows == UNSEEN
    card = (folder / "README.md").read_text()
    assert "path: data/test_unseen-*.parquet" in card
    assert f"come from {UNSEEN} fresh HMMs drawn from the" in card and "none of them in the mixture" in card
    assert f"saved in `{UNSEEN_PARAMS_FILENAME}`" in card


def test_a_corpus_without_the_split_has_no_unseen_split_and_no_unseen_parameters(exported):
    folder = exported[0]
    assert not (folder / UNSEEN_PARAMS_FILENAME).exists()
    card = (folder / "README.md").read_text()
    assert not any(text in card for text in ("data/test_unseen", "Unseen tasks", UNSEEN_PARAMS_FILENAME))
    assert hmm_datasets.load_unseen_params(folder) is None
    for corpus in (hmm_datasets.open_corpus(str(folder)), hmm_datasets.open_corpus("tiny")):
        assert "test_unseen" not in corpus.splits and corpus.unseen_params is None
        with pytest.raises(ValueError, match="has no test_unseen split \\(num_test_unseen=0\\)"):
            corpus.split("test_unseen")
    with pytest.raises(ValueError, match="has no test_unseen split: set num_test_unseen above 0"):
        hmm_datasets.tables_for_split(hmm_datasets.get_preset("tiny"), "test_unseen")


def test_a_folder_missing_or_mismatching_its_unseen_parameters_is_refused(exported, tmp_path):
    folder = tmp_path / "corpus"
    shutil.copytree(exported[UNSEEN], folder)
    unseen_task_params(_config(num_test_unseen=3)).save(folder / UNSEEN_PARAMS_FILENAME)
    with pytest.raises(ValueError, match="num_test_unseen=3 but the corpus config says num_test_unseen=16"):
        hmm_datasets.load_unseen_params(folder)
    (folder / UNSEEN_PARAMS_FILENAME).unlink()
    with pytest.raises(ValueError, match=f"has no {UNSEEN_PARAMS_FILENAME} although .*num_test_unseen=16"):
        hmm_datasets.load_unseen_params(folder)


# ---- the task-diversity presets ----------------------------------------------------------------
@pytest.mark.parametrize("num_tasks", [32, 512, 8192])
def test_the_diversity_presets_are_small_with_k_tasks_and_an_unseen_split(num_tasks):
    config, small = hmm_datasets.get_preset(f"diversity-{num_tasks}"), hmm_datasets.get_preset("small")
    counts = ("tasks", "train", "validation", "test", "test_unseen")
    sizes = [getattr(config, f"num_{name}") for name in counts]
    assert sizes == [num_tasks, 65536, small.num_validation, small.num_test, 1024]
    changed = {"num_tasks", "num_train", "num_test_unseen"}
    same = {key: value for key, value in config.generation_fields().items() if key not in changed}
    assert same == {key: value for key, value in small.generation_fields().items() if key not in changed}
    assert config.num_train // num_tasks == {32: 2048, 512: 128, 8192: 8}[num_tasks]
    assert load_dataset_builder("hmm_mixture", f"diversity-{num_tasks}").config == config


def test_a_diversity_preset_streams_and_opens_by_name(monkeypatch):
    stream = load_dataset("hmm_mixture", "diversity-512", split="test_unseen", streaming=True)
    rows = list(stream.take(4))
    assert len(rows) == 4 and all(0 <= row["task_id"] < 1024 for row in rows)
    assert all(len(row["input_ids"]) == 136 for row in rows)
    monkeypatch.setattr(corpus_module, "load_hmm_mixture", lambda config, num_proc=None: {})  # no 65k rows
    corpus = hmm_datasets.open_corpus("diversity-32")
    assert corpus.config == hmm_datasets.get_preset("diversity-32") and corpus.source == "diversity-32"
    assert corpus.params.num_tasks == 32 and corpus.unseen_params.num_tasks == 1024
    small = hmm_datasets.sample_hmm_params(hmm_datasets.get_preset("small"))
    np.testing.assert_array_equal(corpus.params.emissions, small.emissions)  # the small mixture itself
