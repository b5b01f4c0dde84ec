"""`HMMMixture`: the `datasets` builder of the mixture-of-HMMs corpus.

    import hmm_datasets
    from datasets import load_dataset
    ds = load_dataset("hmm_mixture", "small", num_proc=2)

A config plus three short methods, in the manner of `datasets`' packaged builders (the
Parquet one, say); the sampling lives in `sampler.py`. Like them it is an
`ArrowBasedBuilder`: the sampler draws a block of rows at once and the block goes to
Arrow as one table. A `GeneratorBasedBuilder` encodes row by row, which measured 4.8x
slower at the `paper` row length (4.9k vs 23.6k rows/s written per process).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
from datasets.builder import Key
from datasets.table import table_cast

from model_cards import CITATION

from .config import PRESETS, SPLITS, HMMMixtureConfig, check_field_names, get_preset
from .params import HMMParams, check_disjoint, sample_hmm_params, unseen_task_params
from .sampler import ROWS_PER_BLOCK, SamplingTables, generate_rows

CONFIG_MARKER = "hmm_mixture config:"
_GENERATING_MODULES = ("config.py", "params.py", "sampler.py", "layout.py", "hmm_mixture.py")


def generator_code_hash() -> str:
    """Hash of the source of every module that decides the generated rows (the cache key)."""
    digest = hashlib.sha256()
    for name in _GENERATING_MODULES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()[:16]


def corpus_features(config: HMMMixtureConfig) -> datasets.Features:
    """The data contract's columns, fixed-length lists of the row length L."""
    length = config.sequence_length
    return datasets.Features(
        {
            "input_ids": datasets.List(datasets.Value("int16"), length=length),
            "hidden_states": datasets.List(datasets.Value("int16"), length=length),
            "task_id": datasets.Value("int32"),
            "segment_ids": datasets.List(datasets.Value("int16"), length=length),
        }
    )


def describe(config: HMMMixtureConfig) -> str:
    """DatasetInfo description: a sentence, then the config as JSON (read by `load_corpus_config`)."""
    return (
        f"Mixture of {config.num_tasks} HMMs ({config.num_states} states, {config.vocab_size} tokens, "
        f"delimiter {config.delimiter}); rows of {config.num_demos} demonstrations of "
        f"{config.demo_length} tokens and a test sequence of {config.test_length} tokens."
        f"{_unseen_sentence(config)}\n\n{CONFIG_MARKER}\n{config.to_json()}"
    )


def _unseen_sentence(config: HMMMixtureConfig) -> str:
    if config.num_test_unseen == 0:
        return ""
    return (
        f" The test_unseen split's rows come from {config.num_test_unseen} fresh HMMs of the same prior, "
        "none of them in the mixture (task_id indexes them)."
    )


@functools.lru_cache(maxsize=2)
def _params_from_json(config_json: str) -> HMMParams:
    return sample_hmm_params(HMMMixtureConfig.from_dict(json.loads(config_json)))


@functools.lru_cache(maxsize=2)
def _unseen_params_from_json(config_json: str) -> HMMParams | None:
    unseen = unseen_task_params(HMMMixtureConfig.from_dict(json.loads(config_json)))
    if unseen is not None:
        check_disjoint(_params_from_json(config_json), unseen)
    return unseen


@functools.lru_cache(maxsize=4)
def _tables_from_json(config_json: str, unseen: bool = False) -> SamplingTables:
    params = _unseen_params_from_json(config_json) if unseen else _params_from_json(config_json)
    return SamplingTables.from_params(params)


def _config_json(config: HMMMixtureConfig) -> str:
    return json.dumps(config.generation_fields(), sort_keys=True)


def params_for_config(config: HMMMixtureConfig) -> HMMParams:
    """The HMM parameters of `config`, sampled once per process and cached."""
    return _params_from_json(_config_json(config))


def unseen_params_for_config(config: HMMMixtureConfig) -> HMMParams | None:
    """The HMMs of `config`'s test_unseen split (None without it), sampled once per process,
    cached, and checked to share no HMM with the mixture (`params.check_disjoint`)."""
    return _unseen_params_from_json(_config_json(config))


def tables_for_split(config: HMMMixtureConfig, split: str) -> SamplingTables:
    """The `SamplingTables` the rows of `split` are drawn from (cached): the unseen HMMs' for
    test_unseen (its `task_id` indexes them), the mixture's for every other split."""
    unseen = split == "test_unseen"
    if config.num_rows(split) == 0 and unseen:
        raise ValueError(f"the config {config.name} has no test_unseen split: set num_test_unseen above 0.")
    return _tables_from_json(_config_json(config), unseen)


def shard_row_ranges(num_rows: int) -> list[tuple[int, int]]:
    """Split rows into shards aligned with the sampler's blocks (so no block is drawn twice)."""
    return [(start, min(start + ROWS_PER_BLOCK, num_rows)) for start in range(0, num_rows, ROWS_PER_BLOCK)]


def rows_to_table(rows: dict[str, np.ndarray], features: datasets.Features) -> pa.Table:
    """Sampler output (`[B, L]` and `[B]` arrays) as an Arrow table with the corpus features."""
    columns = {}
    for name, column in rows.items():
        if column.ndim == 2:
            columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(column.ravel()), column.shape[1])
        else:
            columns[name] = pa.array(column)
    return table_cast(pa.table(columns), features.arrow_schema)


class HMMMixture(datasets.ArrowBasedBuilder):
    """Rows `demo_1 <delim> ... demo_N <delim> test` from a mixture of random HMMs."""

    BUILDER_CONFIG_CLASS = HMMMixtureConfig
    BUILDER_CONFIGS = list(PRESETS.values())
    DEFAULT_CONFIG_NAME = "small"

    def __init__(self, *args, hash: str | None = None, **kwargs):
        super().__init__(*args, hash=hash or generator_code_hash(), **kwargs)

    def _create_builder_config(self, config_name=None, custom_features=None, config_id=None, **config_kwargs):
        check_field_names(config_kwargs)  # a misspelt field gets the nearest one's name, not datasets' words
        config, config_id = super()._create_builder_config(
            config_name, custom_features, config_id, **config_kwargs
        )
        config.validate()  # keyword overrides are applied with setattr, after __post_init__
        return config, config_id

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description=describe(self.config),
            features=corpus_features(self.config),
            citation=CITATION,
            homepage="https://arxiv.org/abs/2506.01919",
        )

    def _split_generators(self, dl_manager) -> list[datasets.SplitGenerator]:
        splits = [split for split in SPLITS if self.config.num_rows(split) > 0]
        for split in splits:  # sample here, so forked workers inherit them
            tables_for_split(self.config, split)
        return [
            datasets.SplitGenerator(
                name=split,
                gen_kwargs={"split": split, "row_ranges": shard_row_ranges(self.config.num_rows(split))},
            )
            for split in splits
        ]

    def _generate_tables(self, split: str, row_ranges: list[tuple[int, int]]):
        tables = tables_for_split(self.config, split)
        for shard, (start, stop) in enumerate(row_ranges):
            rows = generate_rows(self.config, tables, split, start, stop)
            yield Key(shard, 0), rows_to_table(rows, self.info.features)


def builder_for(config: HMMMixtureConfig, **builder_kwargs) -> HMMMixture:
    """The `HMMMixture` builder of `config` (a preset by name when it is one, sharing its cache)."""
    preset = PRESETS.get(config.name)
    if preset is not None and preset.to_dict() == config.to_dict():
        return HMMMixture(config_name=config.name, **builder_kwargs)
    return HMMMixture(**builder_kwargs, **config.to_dict())


def load_hmm_mixture(
    name: str | HMMMixtureConfig = "small",
    split: str | None = None,
    *,
    num_proc: int | None = None,
    streaming: bool = False,
    cache_dir: str | None = None,
    **overrides,
):
    """`load_dataset("hmm_mixture", name, **overrides)` through the builder class directly.

    Needs no registration with `datasets` (the fallback if its internals move).
    """
    config = name if isinstance(name, HMMMixtureConfig) else get_preset(name, **overrides)
    builder = builder_for(config, cache_dir=cache_dir)
    if streaming:
        return builder.as_streaming_dataset(split=split)
    builder.download_and_prepare(num_proc=num_proc)
    return builder.as_dataset(split=split)
