"""Offline, isolated test runs: no network, a private datasets cache, two torch threads."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True, scope="session")
def _private_datasets_cache(tmp_path_factory):
    """Keep generated corpora out of the user's ~/.cache."""
    import datasets.config

    cache = tmp_path_factory.mktemp("hf_datasets_cache")
    previous = datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = cache
    datasets.disable_progress_bars()
    yield cache
    datasets.config.HF_DATASETS_CACHE = previous
