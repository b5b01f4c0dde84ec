import json
import re
import shutil

import numpy as np
import pytest
from datasets import load_dataset

import hmm_datasets
from hmm_datasets import export
from hmm_datasets.corpus import open_corpus
from hmm_datasets.names import MANIFEST_FILENAME, PARAMS_FILENAME


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export") / "tiny-corpus"
    hmm_datasets.export_corpus(hmm_datasets.get_preset("tiny"), folder, table_rows=32, progress=False)
    return folder


def test_folder_is_a_hub_dataset_repo(exported):
    names = sorted(p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file())
    assert names == [
        "README.md",
        "bayes_accuracy.json",
        "corpus_manifest.json",
        "data/test-00000-of-00001.parquet",
        "data/train-00000-of-00001.parquet",
        "data/validation-00000-of-00001.parquet",
        "hmm_mixture_config.json",
        PARAMS_FILENAME,
    ]
    card = (exported / "README.md").read_text()
    assert card.startswith("---\n") and "configs:" in card and "path: data/train-*.parquet" in card
    assert "Bayes-optimal vs oracle top-1 accuracy on 32 rows" in card
    assert "arxiv:2506.01919" in card
    table = json.loads((exported / "bayes_accuracy.json").read_text())
    assert [row["num_demos"] for row in table["by_num_demos"]] == [0, 1, 2, 4]


def test_load_dataset_on_the_folder_needs_no_plugin(exported, run_without_plugin):
    """In a fresh process where the plugin cannot be imported, the rows come back unchanged."""
    stdout = run_without_plugin(
        f"""
        import json
        from datasets import load_dataset
        ds = load_dataset({str(exported)!r}, split="validation")
        rows = ds[:]
        print(json.dumps({{"ids": rows["input_ids"], "tasks": rows["task_id"], "features": str(ds.features)}}))
        """
    )
    loaded = json.loads(stdout.strip().splitlines()[-1])
    expected = load_dataset("hmm_mixture", "tiny", split="validation")[:]
    np.testing.assert_array_equal(np.asarray(loaded["ids"]), np.asarray(expected["input_ids"]))
    np.testing.assert_array_equal(loaded["tasks"], expected["task_id"])
    assert "length=52" in loaded["features"]


def test_parameters_and_config_come_back(exported):
    config = hmm_datasets.load_corpus_config(exported)
    assert config == hmm_datasets.get_preset("tiny")
    params = hmm_datasets.load_hmm_params(exported)
    original = hmm_datasets.sample_hmm_params(config)
    np.testing.assert_allclose(params.transitions, original.transitions, atol=1e-7)


def test_a_folder_without_parameters_says_how_to_fix_it(exported, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "hmm_mixture_config.json").write_text((exported / "hmm_mixture_config.json").read_text())
    with pytest.raises(ValueError, match=f"has no {PARAMS_FILENAME}.*scripts/generate.py"):
        hmm_datasets.load_hmm_params(bare)
    with pytest.raises(ValueError, match="no such corpus folder: .*nowhere"):  # a path: never a Hub id
        hmm_datasets.load_hmm_params(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="neither a folder nor a reachable Hub dataset repo"):
        hmm_datasets.load_hmm_params("no-such-org-here/nowhere")
    with pytest.raises(ValueError, match="no hmm_mixture_config.json"):
        hmm_datasets.load_corpus_config(tmp_path)


def test_parameters_that_disagree_with_the_corpus_are_refused(exported, tmp_path):
    folder = tmp_path / "mismatch"
    folder.mkdir()
    (folder / "hmm_mixture_config.json").write_text((exported / "hmm_mixture_config.json").read_text())
    hmm_datasets.sample_hmm_params(hmm_datasets.get_preset("tiny", num_states=5)).save(
        folder / PARAMS_FILENAME
    )
    with pytest.raises(ValueError, match="num_states=5 but the corpus config says num_states=6"):
        hmm_datasets.load_hmm_params(folder)


def test_existing_folders_are_kept_unless_overwrite(exported, tmp_path):
    folder = tmp_path / "corpus"
    shutil.copytree(exported, folder)
    with pytest.raises(ValueError, match="already exists and is not empty: pass overwrite=True"):
        hmm_datasets.export_corpus(hmm_datasets.get_preset("tiny", seed=1), folder, progress=False)
    hmm_datasets.export_corpus(
        hmm_datasets.get_preset("tiny", seed=1), folder, table_rows=0, overwrite=True, progress=False
    )
    assert hmm_datasets.load_corpus_config(folder).seed == 1  # a corpus folder it wrote: replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]  # no staging or old folders left


@pytest.mark.parametrize("unrelated", ["notes.txt", "data/notes.txt"])
def test_overwrite_refuses_a_folder_holding_files_it_did_not_write(exported, tmp_path, unrelated):
    """--overwrite replaces only a corpus folder this project wrote: nothing else is ever deleted."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    corpus = tmp_path / "corpus"
    shutil.copytree(exported, corpus)
    (corpus / unrelated).write_text("keep me too")
    for folder, held in ((mine, "notes.txt"), (corpus, unrelated)):
        before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
        with pytest.raises(ValueError, match=f"not a corpus folder this project wrote \\(it holds {held}\\)"):
            hmm_datasets.export_corpus(
                hmm_datasets.get_preset("tiny"), folder, table_rows=0, overwrite=True, progress=False
            )
        assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    assert (mine / "notes.txt").read_text() == "keep me" and (corpus / unrelated).read_text() == "keep me too"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "mine"]


@pytest.mark.parametrize("error", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_failed_export_leaves_nothing_that_looks_complete(tmp_path, monkeypatch, error):
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(export, "render_dataset_card", fail)
    folder = tmp_path / "corpus"
    with pytest.raises(type(error)):
        hmm_datasets.export_corpus(hmm_datasets.get_preset("tiny"), folder, table_rows=0, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_overwrite_keeps_the_old_corpus(exported, tmp_path, monkeypatch):
    folder = tmp_path / "corpus"
    hmm_datasets.export_corpus(hmm_datasets.get_preset("tiny"), folder, table_rows=0, progress=False)
    before = (folder / "README.md").read_text()
    monkeypatch.setattr(export, "render_dataset_card", lambda *a, **k: (_ for _ in ()).throw(OSError("boom")))
    with pytest.raises(OSError):
        hmm_datasets.export_corpus(
            hmm_datasets.get_preset("tiny", seed=3), folder, overwrite=True, progress=False
        )
    assert (folder / "README.md").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_custom_configs_export_with_regeneration_instructions(tmp_path):
    config = hmm_datasets.get_preset("tiny", num_tasks=3, transition_rank=2)
    folder = hmm_datasets.export_corpus(config, tmp_path / "custom", table_rows=0, progress=False)
    card = (folder / "README.md").read_text()
    assert "load_dataset(\"hmm_mixture\", 'tiny', num_tasks=3, transition_rank=2)" in card
    assert "transition_left" in card
    assert hmm_datasets.load_hmm_params(folder).transition_rank == 2


# ---- corpus folders that cannot lie ------------------------------------------------------------
def damage(folder, how: str) -> None:
    """Delete, truncate or replace (with another split's shard) the test split's Parquet file."""
    [shard] = (folder / "data").glob("test-*.parquet")
    if how == "deleted":
        shard.unlink()
    elif how == "truncated":
        shard.write_bytes(shard.read_bytes()[:-100])
    else:
        shutil.copyfile(next((folder / "data").glob("validation-*.parquet")), shard)


@pytest.mark.parametrize("how", ["deleted", "truncated", "replaced"])
def test_a_damaged_corpus_folder_is_one_line_naming_the_folder_and_the_split(exported, tmp_path, how):
    folder = tmp_path / "corpus"
    shutil.copytree(exported, folder)
    assert export.corpus_folder_problem(folder) is None
    damage(folder, how)
    assert export.corpus_folder_problem(folder).startswith(f"{folder} is ")
    with pytest.raises(ValueError, match="the test split") as refused:
        open_corpus(str(folder))
    message = str(refused.value)
    assert message.startswith(str(folder)) and "\n" not in message and "hmm-generate" in message


@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_a_folder_exported_before_manifests_opens_unless_a_split_is_lost(exported, tmp_path, how):
    folder = tmp_path / "corpus"
    shutil.copytree(exported, folder)
    (folder / MANIFEST_FILENAME).unlink()
    assert len(open_corpus(str(folder)).split("test")) == 64
    damage(folder, how)
    with pytest.raises(
        ValueError, match=f"^{re.escape(str(folder))} is (incomplete|damaged): the test split"
    ):
        open_corpus(str(folder))


def test_paths_that_can_only_be_local_are_never_read_as_hub_ids(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "corpus").mkdir(parents=True)
    for source in ("runs/corpsu", "./corpus", "/no/such/corpus", "~/no-such-corpus", "a/b/c", "runs"):
        assert export.looks_local(source), source
    for source in ("org/hmm_mixture", "gpt2"):
        assert not export.looks_local(source), source
    with pytest.raises(
        ValueError, match=r"^no such corpus folder: runs/corpsu \(did you mean runs/corpus\?\)"
    ):
        export.local_folder("runs/corpsu", "dataset")


def test_generate_refuses_bad_input_in_one_line_and_writes_nothing(run_script, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    arguments = ["--preset", "tiny", "--out", folder, "--table-rows", "0"]
    for extra, message in [
        ([], "already exists and is not empty"),
        (["--overwrite"], "not a corpus folder this project wrote (it holds notes.txt)"),
        (["--num-proc", "0"], "argument --num-proc: 0 must be at least 1"),
        (["--corpus.num_taskss", "4"], "did you mean num_tasks?"),
    ]:
        done = run_script("scripts/generate.py", *arguments, *extra)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("error: ") and message in done.stderr
        assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
            "notes",
            "notes/notes.txt",
        ]
