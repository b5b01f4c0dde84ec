"""The suite leaves the user's home alone: every cache it fills is the session's (conftest.py)."""

import os
import subprocess
import sys
from pathlib import Path

import datasets.config
import huggingface_hub.constants
import matplotlib

LOADS_A_CORPUS = """
import matplotlib.pyplot
from datasets import load_dataset

import hmm_datasets

rows = load_dataset("hmm_mixture", "tiny", split="validation")
rows.to_parquet("rows.parquet")
assert load_dataset("parquet", data_files="rows.parquet", split="train")["input_ids"] == rows["input_ids"]
"""


def test_a_process_a_test_starts_fills_no_cache_in_its_home(tmp_path, session_cache):
    """What the suite's processes inherit keeps the builder's cache, the Parquet loader's and
    matplotlib's out of $HOME (without it: `hmm_mixture/tiny` in ~/.cache/huggingface)."""
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", LOADS_A_CORPUS],
        cwd=tmp_path,
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(path.relative_to(home) for path in home.rglob("*")) == []
    assert list((session_cache / "huggingface" / "datasets").glob("hmm_mixture/tiny/*"))  # they went here


def test_this_process_keeps_its_caches_in_the_session_folder(session_cache):
    caches = {
        "datasets": datasets.config.HF_DATASETS_CACHE,
        "datasets downloads": datasets.config.DOWNLOADED_DATASETS_PATH,
        "remote code": datasets.config.HF_MODULES_CACHE,
        "hub": huggingface_hub.constants.HF_HUB_CACHE,
        "matplotlib": matplotlib.get_cachedir(),
        "matplotlib config": matplotlib.get_configdir(),
    }
    outside = {name: path for name, path in caches.items() if not Path(path).is_relative_to(session_cache)}
    assert outside == {}
