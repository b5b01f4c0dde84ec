import subprocess
import sys

import datasets
import numpy as np
import pytest
from datasets import load_dataset, load_dataset_builder

import hmm_datasets
from hmm_datasets import hmm_mixture, registration
from hmm_datasets.sampler import ROWS_PER_BLOCK

# tiny, but with several shards per split so that num_proc has something to split
SHARDED = {"num_train": 2 * ROWS_PER_BLOCK + 100, "num_validation": 30, "num_test": 0}


def _columns(dataset):
    return {name: np.asarray(dataset[name]) for name in dataset.column_names}


def test_load_dataset_by_name_gives_the_data_contract():
    ds = load_dataset("hmm_mixture", "tiny")
    assert set(ds) == {"train", "validation", "test"}
    config = hmm_datasets.get_preset("tiny")
    assert ds["train"].num_rows == config.num_train
    assert ds["train"].features == hmm_datasets.corpus_features(config)
    row = ds["train"][0]
    assert len(row["input_ids"]) == config.sequence_length
    assert row["input_ids"][config.demo_length] == config.vocab_size  # first delimiter
    assert row["hidden_states"][config.demo_length] == -1


def test_rows_equal_the_sampler_output():
    config = hmm_datasets.get_preset("tiny")
    ds = load_dataset("hmm_mixture", "tiny", split="validation")
    tables = hmm_datasets.SamplingTables.from_params(hmm_datasets.sample_hmm_params(config))
    expected = hmm_datasets.generate_rows(config, tables, "validation", 0, config.num_validation)
    for name, column in _columns(ds).items():
        np.testing.assert_array_equal(column, expected[name])


def test_keyword_overrides_change_the_config_and_the_cache_key():
    base = load_dataset_builder("hmm_mixture", "tiny")
    custom = load_dataset_builder("hmm_mixture", "tiny", num_tasks=3)
    assert custom.config.num_tasks == 3
    assert custom.cache_dir != base.cache_dir
    ds = load_dataset("hmm_mixture", "tiny", num_tasks=3, split="train")
    assert set(np.unique(ds["task_id"])) <= {0, 1, 2}


def test_an_invalid_override_fails_with_the_field_named():
    with pytest.raises(ValueError, match="transition_rank=99 is larger than num_states=6"):
        load_dataset_builder("hmm_mixture", "tiny", transition_rank=99)
    with pytest.raises(ValueError, match="'num_taks' \\(did you mean num_tasks\\?\\)"):
        load_dataset_builder("hmm_mixture", "tiny", num_taks=3)


def test_num_proc_and_streaming_give_identical_rows():
    serial = load_dataset("hmm_mixture", "tiny", split="train", **SHARDED)
    parallel = load_dataset(
        "hmm_mixture", "tiny", split="train", num_proc=2, download_mode="force_redownload", **SHARDED
    )
    streamed = load_dataset("hmm_mixture", "tiny", split="train", streaming=True, **SHARDED)
    assert streamed.num_shards == 3
    a, b = _columns(serial), _columns(parallel)
    streamed_ids = np.asarray([row["input_ids"] for row in streamed])
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    np.testing.assert_array_equal(streamed_ids, a["input_ids"])


def test_cache_key_changes_with_the_generating_code(monkeypatch):
    before = load_dataset_builder("hmm_mixture", "tiny").cache_dir
    monkeypatch.setattr(hmm_mixture, "generator_code_hash", lambda: "0123456789abcdef")
    after = load_dataset_builder("hmm_mixture", "tiny").cache_dir
    assert before != after and "0123456789abcdef" in after


def test_code_hash_covers_the_sampler_source(monkeypatch, tmp_path):
    original = hmm_mixture.generator_code_hash()
    package = tmp_path / "pkg"
    package.mkdir()
    for name in hmm_mixture._GENERATING_MODULES:
        source = (hmm_mixture.Path(hmm_mixture.__file__).parent / name).read_text()
        (package / name).write_text(source + ("\n# changed\n" if name == "sampler.py" else ""))
    monkeypatch.setattr(hmm_mixture, "__file__", str(package / "hmm_mixture.py"))
    assert hmm_mixture.generator_code_hash() != original


def test_builder_class_route_needs_no_registration():
    ds = hmm_datasets.load_hmm_mixture("tiny", split="validation")
    by_name = load_dataset("hmm_mixture", "tiny", split="validation")
    np.testing.assert_array_equal(np.asarray(ds["input_ids"]), np.asarray(by_name["input_ids"]))


def test_other_names_still_reach_datasets(tmp_path):
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n")
    ds = load_dataset("csv", data_files=str(tmp_path / "rows.csv"), split="train")
    assert ds[0] == {"a": 1, "b": 2}


def test_registration_fails_clearly_when_datasets_internals_move(monkeypatch):
    monkeypatch.setattr(datasets.load, "dataset_module_factory", lambda name, **kw: None)
    with pytest.raises(registration.RegistrationError, match="load_hmm_mixture"):
        registration.register()
    monkeypatch.delattr(datasets.load, "dataset_module_factory")
    with pytest.raises(registration.RegistrationError, match="internals moved"):
        registration.register()


def test_registration_is_idempotent():
    registration.register()
    registration.register()
    factory = datasets.load.dataset_module_factory
    assert getattr(factory, registration._MARK)
    assert not getattr(factory.__wrapped__, registration._MARK, False)


def test_dataset_remembers_its_config_and_parameters():
    ds = load_dataset("hmm_mixture", "tiny", num_tasks=5, split="test")
    config = hmm_datasets.load_corpus_config(ds)
    assert config.num_tasks == 5
    params = hmm_datasets.load_hmm_params(ds)
    assert params.num_tasks == 5


def test_the_corpus_is_generated_without_importing_torch(tmp_path):
    """`import hmm_datasets` and generating a corpus through `load_dataset` need no torch (what
    needs it, the exact predictors, is imported on first use): a command that only parses its
    arguments, or a user who only wants the data, does not pay torch's import."""
    script = (
        "import sys\nimport hmm_datasets\nfrom datasets import load_dataset\n"
        "rows = load_dataset('hmm_mixture', 'tiny', split='validation')\n"
        "assert len(rows) > 0 and 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:3]\n"
        "assert hmm_datasets.BayesOptimalPredictor.__name__ == 'BayesOptimalPredictor' and 'torch' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
