"""Export a generated corpus to a folder that is a valid Hub dataset repo, and read it back.

    folder/
      README.md                 dataset card (YAML `configs:` so `load_dataset(folder)` works)
      data/train-00000-of-00002.parquet ...
      hmm_params.safetensors    the HMM parameters
      hmm_mixture_config.json   the HMMMixtureConfig that generated it
      bayes_accuracy.json       the Bayes-optimal / oracle accuracy table

The folder is assembled in a hidden sibling and renamed into place at the end, so a
failed or interrupted export never leaves a folder that looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
from huggingface_hub import DatasetCard, snapshot_download

from model_cards.render import render_dataset_card

from .bayes import BayesOptimalPredictor
from .ceiling import accuracy_table, format_accuracy_table
from .config import GENERATOR_VERSION, PRESETS, SPLITS, HMMMixtureConfig
from .hmm_mixture import CONFIG_MARKER, builder_for, generator_code_hash, params_for_config
from .layout import SampleLayout
from .params import PARAMS_FILENAME, HMMParams, task_diagnostics

CONFIG_FILENAME = "hmm_mixture_config.json"
TABLE_FILENAME = "bayes_accuracy.json"
DATA_DIR = "data"


def export_corpus(
    config: HMMMixtureConfig,
    folder: str | os.PathLike,
    *,
    num_proc: int | None = None,
    overwrite: bool = False,
    table_rows: int = 512,
    progress: bool = True,
) -> Path:
    """Generate the corpus of `config` and write it to `folder` (see module docstring).

    Args:
        num_proc: processes for generation (rows are identical whatever the value).
        overwrite: replace an existing folder (only once the new one is complete).
        table_rows: test rows scored by the Bayes-optimal table in the card (0: no table).
    Returns the folder.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} exists and is not a folder: choose another --out path.")
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        raise ValueError(
            f"{folder} already exists and is not empty: pass overwrite=True (--overwrite) to replace it, "
            "or choose another folder."
        )

    def write(staging: Path) -> None:
        _write_corpus(config, staging, num_proc=num_proc, table_rows=table_rows, progress=progress)
        facts = dataset_card_facts(
            config, load_hmm_params(staging), _read_table(staging), _data_bytes(staging)
        )
        card = render_dataset_card(facts, location=str(folder))
        card.save(staging / "README.md")

    return build_folder(folder, write)


def write_atomically(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Make `path`, a file or a folder, whole or not at all: `write(staging)` creates it at a
    hidden sibling, `.<name>.partial`, which then takes the place of `path`.

    The sibling is cleared first (a leftover of a killed run) and removed if `write` fails; an old
    `path` is replaced only once the new one is whole (a folder: moved aside, then removed). So a
    failed or interrupted write never leaves anything that looks complete, nor loses the old one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.parent / f".{path.name}.partial"
    _remove(staging)
    try:
        write(staging)
        if staging.is_dir():
            _replace_folder(staging, path)
        else:
            os.replace(staging, path)
    except BaseException:
        _remove(staging)
        raise
    return path


def build_folder(folder: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """`write_atomically` for a folder: `write(staging)` fills an empty staging folder."""

    def make(staging: Path) -> None:
        staging.mkdir()
        write(staging)

    return write_atomically(folder, make)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def _write_corpus(config: HMMMixtureConfig, out: Path, *, num_proc, table_rows: int, progress: bool) -> None:
    prepare_dir = out / "_prepare"
    builder = builder_for(config, cache_dir=str(out / "_cache"))
    if not progress:
        datasets.disable_progress_bars()
    try:
        builder.download_and_prepare(output_dir=str(prepare_dir), file_format="parquet", num_proc=num_proc)
    finally:
        if not progress:
            datasets.enable_progress_bars()
    (out / DATA_DIR).mkdir()
    for split in SPLITS:
        files = sorted(prepare_dir.glob(f"*-{split}*.parquet"))
        for index, path in enumerate(files):
            path.rename(out / DATA_DIR / f"{split}-{index:05d}-of-{len(files):05d}.parquet")
    shutil.rmtree(prepare_dir)
    shutil.rmtree(out / "_cache", ignore_errors=True)
    for lock in out.glob("*.lock"):  # datasets' file locks for the preparation folder
        lock.unlink()

    params = params_for_config(config)
    params.save(out / PARAMS_FILENAME)
    record = {
        **config.to_dict(),
        "generator_version": str(GENERATOR_VERSION),
        "code_hash": generator_code_hash(),
    }
    (out / CONFIG_FILENAME).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

    table = None
    if table_rows > 0 and config.num_test > 0:
        test = read_parquet_columns(
            sorted((out / DATA_DIR).glob("test-*.parquet")), ["input_ids", "task_id"], table_rows
        )
        table = accuracy_table(
            BayesOptimalPredictor(params),
            test["input_ids"],
            test["task_id"],
            SampleLayout.from_config(config),
            progress=progress,
        )
        (out / TABLE_FILENAME).write_text(json.dumps(table, indent=2) + "\n")


def _read_table(folder: Path) -> dict | None:
    path = folder / TABLE_FILENAME
    return json.loads(path.read_text()) if path.is_file() else None


def _data_bytes(folder: Path) -> dict[str, int]:
    """Bytes of the Parquet shards of each split."""
    return {
        split: sum(path.stat().st_size for path in (folder / DATA_DIR).glob(f"{split}-*.parquet"))
        for split in SPLITS
    }


def dataset_card_for_folder(folder: str | os.PathLike, repo_id: str | None = None) -> DatasetCard:
    """The dataset card of an exported corpus folder, its usage written for `repo_id` when given."""
    folder = Path(folder)
    config, params, table = load_corpus_config(folder), load_hmm_params(folder), _read_table(folder)
    facts = dataset_card_facts(config, params, table, _data_bytes(folder))
    return render_dataset_card(facts, location=repo_id or str(folder), repo_id=repo_id)


def read_parquet_columns(
    files: list[Path], columns: list[str], limit: int | None = None
) -> dict[str, np.ndarray]:
    """The first `limit` rows of some columns of Parquet shards, as arrays (lists become [rows, L])."""
    tables, total = [], 0
    for path in files:
        if limit is not None and total >= limit:
            break
        table = pq.read_table(path, columns=columns)
        tables.append(table)
        total += table.num_rows
    out = {}
    for name in columns:
        chunks = [t.column(name).combine_chunks() for t in tables]
        values = [
            c.flatten().to_numpy().reshape(len(c), -1) if hasattr(c, "flatten") else c.to_numpy()
            for c in chunks
        ]
        out[name] = np.concatenate(values)[:limit]
    return out


def _replace_folder(staging: Path, folder: Path) -> None:
    """Move `staging` to `folder`; an old `folder` is removed only after the move succeeded."""
    old = None
    if folder.exists():
        old = folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
        folder.rename(old)
    staging.rename(folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def dataset_card_facts(
    config: HMMMixtureConfig, params: HMMParams, table: dict | None, data_bytes: dict[str, int]
) -> dict:
    """What the dataset card says about a corpus, as plain data (`model_cards.render.render_dataset_card`
    renders it): its config, splits and their Parquet bytes, the HMM tensors saved beside it and
    their diagnostics, and the Bayes-optimal table (`table`, or None)."""
    diagnostics = task_diagnostics(params)
    tensors = [
        ("task_prior", [params.num_tasks], "probability of each task"),
        ("initial", [params.num_tasks, params.num_states], "initial state distribution"),
        (
            "emissions",
            [params.num_tasks, params.num_states, params.vocab_size],
            "emission distribution of each state",
        ),
    ]
    if params.transition_rank is None:
        tensors.append(
            ("transitions", [params.num_tasks, params.num_states, params.num_states], "state transitions")
        )
    else:
        d = params.transition_rank
        tensors += [
            ("transition_left", [params.num_tasks, params.num_states, d], "state -> latent feature"),
            ("transition_right", [params.num_tasks, d, params.num_states], "latent feature -> next state"),
        ]
    splits = [split for split in SPLITS if config.num_rows(split) > 0]
    return {
        "config": {**config.to_dict(), "sequence_length": config.sequence_length},
        "config_json": config.to_json(),
        "generator_version": str(GENERATOR_VERSION),
        "code_hash": generator_code_hash(),
        "data_dir": DATA_DIR,
        "params_file": PARAMS_FILENAME,
        "splits": [
            {
                "name": split,
                "rows": config.num_rows(split),
                "tokens": config.num_rows(split) * config.sequence_length,
                "bytes": data_bytes[split],
            }
            for split in splits
        ],
        "tensors": [
            {"name": name, "shape": f"[{', '.join(map(str, shape))}]", "meaning": meaning}
            for name, shape, meaning in tensors
        ],
        "diagnostics": {
            name: f"{values.mean():.3f} [{values.min():.3f}, {values.max():.3f}]"
            for name, values in diagnostics.items()
            if name != "stationary"
        },
        "table": table or {"num_rows": 0},
        "table_text": format_accuracy_table(table) if table else "(not computed: table_rows=0)",
        "regenerate_args": _regenerate_args(config),
    }


def _regenerate_args(config: HMMMixtureConfig) -> str:
    """`"small", num_tasks=64` : the load_dataset arguments that give this config."""
    base_name = config.name if config.name in PRESETS else config.name.split("-")[0]
    base = PRESETS.get(base_name, PRESETS["small"])
    differences = {
        key: value
        for key, value in config.generation_fields().items()
        if base.generation_fields()[key] != value
    }
    return ", ".join([repr(base.name)] + [f"{key}={value!r}" for key, value in differences.items()])


# ---- reading back -------------------------------------------------------------------
def load_corpus_config(source) -> HMMMixtureConfig:
    """The `HMMMixtureConfig` of an exported folder or of a dataset made by the builder."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source) / CONFIG_FILENAME
        if not path.is_file():
            raise ValueError(
                f"no {CONFIG_FILENAME} in {source}: this folder was not written by export_corpus "
                "(scripts/generate.py). Export the corpus again, or pass its HMMMixtureConfig."
            )
        record = json.loads(path.read_text())
        record.pop("generator_version", None)
        record.pop("code_hash", None)
        return HMMMixtureConfig.from_dict(record)
    info = getattr(source, "info", None)
    if info is None and isinstance(source, dict) and source:  # a DatasetDict
        info = next(iter(source.values())).info
    description = getattr(info, "description", None) or ""
    if CONFIG_MARKER not in description:
        raise ValueError(
            "this dataset carries no hmm_mixture config: pass a folder written by export_corpus, or a "
            "dataset from load_dataset('hmm_mixture', ...)."
        )
    return HMMMixtureConfig.from_dict(json.loads(description.split(CONFIG_MARKER, 1)[1]))


def local_folder(source: str | os.PathLike, repo_type: str, files: list[str] | None = None) -> Path:
    """`source` if it is a folder, else a local copy of the Hub repo it names (only `files`,
    when given); `ValueError` saying why not (no such folder, offline, unknown repo, no access)."""
    folder = Path(source)
    if folder.is_dir():
        return folder
    try:
        return Path(snapshot_download(str(source), repo_type=repo_type, allow_patterns=files))
    except Exception as error:
        reason = " ".join(str(error).split())
        raise ValueError(
            f"{str(source)!r} is neither a folder nor a reachable Hub {repo_type} repo "
            f"({type(error).__name__}: {reason})."
        ) from error


def load_hmm_params(source) -> HMMParams:
    """The HMM parameters of a corpus.

    `source` is an exported folder or the Hub dataset repo it was pushed to (reads
    `hmm_params.safetensors` and checks it against the folder's generation config), a
    dataset returned by `load_dataset("hmm_mixture", ...)` (regenerated from its config,
    which is deterministic), or an `HMMMixtureConfig`.
    """
    if isinstance(source, HMMMixtureConfig):
        return params_for_config(source)
    if isinstance(source, (str, os.PathLike)):
        folder = local_folder(source, "dataset", [PARAMS_FILENAME, CONFIG_FILENAME])
        path = folder / PARAMS_FILENAME
        if not path.is_file():
            raise ValueError(
                f"{folder} has no {PARAMS_FILENAME}: the HMM parameters must be saved beside the corpus. "
                "Export it with scripts/generate.py (or export_corpus), which writes them, or regenerate "
                "them from the config with load_hmm_params(HMMMixtureConfig(...))."
            )
        params = HMMParams.load(path)
        if (folder / CONFIG_FILENAME).is_file():
            params.check_matches(load_corpus_config(folder))
        return params
    return params_for_config(load_corpus_config(source))
