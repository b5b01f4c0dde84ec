"""Export a generated corpus to a folder that is a valid Hub dataset repo, and read it back.

    folder/
      README.md                 dataset card (YAML `configs:` so `load_dataset(folder)` works)
      data/train-00000-of-00002.parquet ...
      hmm_params.safetensors    the HMM parameters
      hmm_params_unseen.safetensors   the test_unseen split's HMMs (only with num_test_unseen > 0)
      hmm_mixture_config.json   the HMMMixtureConfig that generated it
      bayes_accuracy.json       the Bayes-optimal / oracle accuracy table
      corpus_manifest.json      every file above but the card, with its size and SHA-256 (written last)

The folder is assembled in a hidden sibling and renamed into place at the end, so a
failed or interrupted export never leaves a folder that looks complete; the manifest then says
whether it is still whole (`corpus_folder_problem`): a shard deleted, truncated or replaced since
is found before the folder is used.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
from huggingface_hub import DatasetCard, snapshot_download

from model_cards.render import render_dataset_card

from .ambiguity import parameter_measures
from .bayes import BayesOptimalPredictor
from .ceiling import accuracy_table, format_accuracy_table
from .config import GENERATOR_VERSION, PRESETS, SPLITS, HMMMixtureConfig
from .files import build_folder, write_atomically
from .hmm_mixture import (
    CONFIG_MARKER,
    builder_for,
    generator_code_hash,
    params_for_config,
    unseen_params_for_config,
)
from .layout import SampleLayout
from .names import (
    CARD_FILENAME,
    CONFIG_FILENAME,
    DATA_DIR,
    MANIFEST_FILENAME,
    PARAMS_FILENAME,
    TABLE_FILENAME,
    UNSEEN_PARAMS_FILENAME,
)
from .params import HMMParams, task_diagnostics

REPO_NOUNS = {"model": "checkpoint folder", "dataset": "corpus folder"}  # what a local path names


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
    if folder.exists() and any(folder.iterdir()):
        if not overwrite:
            raise ValueError(
                f"{folder} already exists and is not empty: pass overwrite=True (--overwrite) to replace "
                "it, or choose another folder (nothing was written)."
            )
        foreign = foreign_files(folder)
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise ValueError(
                f"{folder} is not a corpus folder this project wrote (it holds {shown}): --overwrite replaces "
                "only an exported corpus. Choose another folder (nothing was deleted)."
            )

    def write(staging: Path) -> None:
        _write_corpus(config, staging, num_proc=num_proc, table_rows=table_rows, progress=progress)
        facts = dataset_card_facts(
            config, load_hmm_params(staging), _read_table(staging), _data_bytes(staging)
        )
        card = render_dataset_card(facts, location=str(folder))
        card.save(staging / CARD_FILENAME)
        write_manifest(staging)  # last: a folder without it was never finished

    return build_folder(folder, write)


# ---- the manifest: is a corpus folder still what was written? ----------------------------------
def write_manifest(folder: Path) -> None:
    """Record every file of a corpus folder but its card with its size and SHA-256 (`MANIFEST_FILENAME`)."""
    files = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_file() and name not in (CARD_FILENAME, MANIFEST_FILENAME):
            files[name] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
    record = json.dumps({"files": files}, indent=1) + "\n"
    write_atomically(folder / MANIFEST_FILENAME, lambda staging: staging.write_text(record))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def corpus_folder_problem(folder: str | os.PathLike) -> str | None:
    """What makes an exported corpus folder unusable, in one phrase, or None when it is whole.

    With a manifest: a file it lists that is missing or differs in size or SHA-256 from the one
    written. Without one (exported before manifests, or by hand): a split its config has rows for
    with no Parquet shard, or a shard whose Parquet footer cannot be read (truncated or damaged).
    """
    folder = Path(folder)
    manifest = folder / MANIFEST_FILENAME
    if not manifest.is_file():
        return _split_problem(folder, load_corpus_config(folder))
    for name, written in json.loads(manifest.read_text())["files"].items():
        path = folder / name
        what = _file_role(name)
        if not path.is_file():
            return f"{folder} is incomplete: {what} is missing"
        if path.stat().st_size != written["bytes"]:
            return f"{folder} is damaged: {what} has {path.stat().st_size} bytes, {written['bytes']} when written"
        if _sha256(path) != written["sha256"]:
            return f"{folder} is damaged: {what} is not the file that was written (its SHA-256 differs)"
    return None


def _file_role(name: str) -> str:
    """`the test split (data/test-00000-of-00001.parquet)` for a shard, else the file's name."""
    if name.startswith(f"{DATA_DIR}/"):
        return f"the {name.split('/', 1)[1].split('-', 1)[0]} split ({name})"
    return name


def _split_problem(folder: Path, config: HMMMixtureConfig) -> str | None:
    for split in SPLITS:
        shards = sorted((folder / DATA_DIR).glob(f"{split}-*.parquet"))
        if config.num_rows(split) > 0 and not shards:
            return (
                f"{folder} is incomplete: the {split} split is missing (no {DATA_DIR}/{split}-*.parquet, "
                f"although its config has num_{split}={config.num_rows(split)})"
            )
        for path in shards:
            try:
                pq.read_metadata(path)
            except Exception:  # pyarrow's errors for a file that is not (whole) Parquet
                name = path.relative_to(folder).as_posix()
                return f"{folder} is damaged: {_file_role(name)} is not a readable Parquet file"
    return None


def check_corpus_folder(folder: str | os.PathLike) -> None:
    """`ValueError` in one line, saying how to regenerate it, if the corpus folder is not whole."""
    problem = corpus_folder_problem(folder)
    if problem is not None:
        raise ValueError(
            f"{problem}. Export it again: hmm-generate --out {folder} --overwrite with the preset and "
            "--corpus.* values it was made with (or rerun the hmm-reproduce that made it, which redoes it)."
        )


def foreign_files(folder: Path) -> list[str]:
    """The entries of `folder` that `export_corpus` did not write: every entry when the folder
    holds no corpus config; with a manifest, anything it does not list; without one (an older
    export), anything outside the export's file names."""
    if not (folder / CONFIG_FILENAME).is_file():
        return sorted(path.relative_to(folder).as_posix() for path in folder.iterdir())
    manifest = folder / MANIFEST_FILENAME
    if manifest.is_file():
        ours = set(json.loads(manifest.read_text())["files"])
    else:
        ours = {CONFIG_FILENAME, PARAMS_FILENAME, UNSEEN_PARAMS_FILENAME, TABLE_FILENAME}
        ours |= {p.relative_to(folder).as_posix() for p in (folder / DATA_DIR).glob("*-*-of-*.parquet")}
    ours |= {CARD_FILENAME, MANIFEST_FILENAME, DATA_DIR}
    found = (path.relative_to(folder).as_posix() for path in folder.rglob("*"))
    return sorted(name for name in found if name not in ours)


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
        files = _prepared_shards(prepare_dir, split)
        for index, path in enumerate(files):
            path.rename(out / DATA_DIR / f"{split}-{index:05d}-of-{len(files):05d}.parquet")
    shutil.rmtree(prepare_dir)
    shutil.rmtree(out / "_cache", ignore_errors=True)
    for lock in out.glob("*.lock"):  # datasets' file locks for the preparation folder
        lock.unlink()

    params = params_for_config(config)
    params.save(out / PARAMS_FILENAME)
    unseen = unseen_params_for_config(config)
    if unseen is not None:
        unseen.save(out / UNSEEN_PARAMS_FILENAME)
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


def _prepared_shards(prepare_dir: Path, split: str) -> list[Path]:
    """The Parquet files `datasets` prepared for `split` (`NAME-test.parquet`, `NAME-test-00000-of-00002.parquet`),
    never another split whose name starts with it (`NAME-test_unseen-...`)."""
    return sorted([*prepare_dir.glob(f"*-{split}.parquet"), *prepare_dir.glob(f"*-{split}-[0-9]*.parquet")])


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
        "unseen": _unseen_facts(config),
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
        "ambiguity": parameter_measures(params, SampleLayout.from_config(config)),
        "table": table or {"num_rows": 0},
        "table_text": format_accuracy_table(table) if table else "(not computed: table_rows=0)",
        "regenerate_args": _regenerate_args(config),
    }


def _unseen_facts(config: HMMMixtureConfig) -> dict | None:
    """What the card says of the test_unseen split, or None without it."""
    if config.num_test_unseen == 0:
        return None
    return {"num_hmms": config.num_test_unseen, "params_file": UNSEEN_PARAMS_FILENAME}


def _regenerate_args(config: HMMMixtureConfig) -> str:
    """`"small", num_tasks=64` : the load_dataset arguments that give this config."""
    names = (config.name, config.name.removesuffix("-custom"), config.name.split("-")[0])
    base = next((PRESETS[name] for name in names if name in PRESETS), PRESETS["small"])
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


def looks_local(source: str | os.PathLike) -> bool:
    """Whether `source` can only be a local path, never a Hub repo id (`name` or `org/name`): a
    path object, or text that exists, starts with `.`, `/` or `~`, has more than one `/`, or whose
    first part (the folder it would be in) exists here."""
    if not isinstance(source, str):
        return True
    first, _, rest = source.partition("/")
    return (
        source.startswith((".", "/", "~"))
        or source.count("/") > 1
        or Path(source).exists()
        or bool(rest and first and Path(first).is_dir())
    )


def no_such_folder(source: str | os.PathLike, repo_type: str) -> str:
    """`no such checkpoint folder: PATH` (or corpus folder), with the nearest sibling's name if any."""
    path = Path(source).expanduser()
    parent = path.parent
    siblings = [p.name for p in parent.iterdir() if p.is_dir() and p != path] if parent.is_dir() else []
    near = difflib.get_close_matches(path.name, siblings, n=1)
    hint = f" (did you mean {parent / near[0]}?)" if near else ""
    return f"no such {REPO_NOUNS.get(repo_type, 'folder')}: {source}{hint}"


def local_folder(source: str | os.PathLike, repo_type: str, files: list[str] | None = None) -> Path:
    """`source` if it is a folder, else a local copy of the Hub repo it names (only `files`,
    when given); `ValueError` saying why not (no such folder, offline, unknown repo, no access).
    A path that `looks_local` but is no folder is never sent to the Hub: "no such ... folder"."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        return folder
    if looks_local(source):
        raise ValueError(no_such_folder(source, repo_type) + ".")
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


def load_unseen_params(source) -> HMMParams | None:
    """The HMMs of a corpus's test_unseen split (`num_test_unseen` of them, uniform prior), or None
    when it has none; `source` as for `load_hmm_params` (a folder or Hub dataset repo reads
    `hmm_params_unseen.safetensors`, checked against its config; a dataset or a config regenerates them)."""
    if isinstance(source, HMMMixtureConfig):
        return unseen_params_for_config(source)
    if not isinstance(source, (str, os.PathLike)):
        return unseen_params_for_config(load_corpus_config(source))
    folder = local_folder(source, "dataset", [UNSEEN_PARAMS_FILENAME, CONFIG_FILENAME])
    config = load_corpus_config(folder)
    if config.num_test_unseen == 0:
        return None
    path = folder / UNSEEN_PARAMS_FILENAME
    if not path.is_file():
        raise ValueError(
            f"{folder} has no {UNSEEN_PARAMS_FILENAME} although its config has num_test_unseen="
            f"{config.num_test_unseen}: export the corpus again (scripts/generate.py --overwrite), which "
            "writes it, or regenerate them with load_unseen_params(HMMMixtureConfig(...))."
        )
    params = HMMParams.load(path)
    params.check_matches(config, unseen=True)
    return params
