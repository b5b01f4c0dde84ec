"""Settings as typed objects: the run config of one training run, the override syntax of every
script, and the one table of named pipelines (`PIPELINES`) behind reproduce and the study.

A run config is one YAML file with five sections, any value overridable on the command line:

    corpus:   {preset: small, <HMMMixtureConfig field>: value, ...}
    data:     {source: builder | <corpus folder> | <Hub dataset id>, num_proc: 2}
    model:    {attn_implementation: sdpa, model_type: hmm_roformer | llama | ..., <its config's field>: value, ...}
    training: {<TrainingArguments field>: value, ...}
    run:      {loss_mask: all | observations | test, vary_num_demos: false, eval_rows: 256}

A reproduction preset's file (configs/tiny.yaml, small.yaml, paper.yaml) adds a sixth,
`analysis:`, the sizes of its analyses (`Settings` fields, `preset_settings`); a run sets it aside.

Sections exist because their fields clash in a flat namespace: `vocab_size` is V for the
corpus and V + 1 for the model, `seed` draws the HMMs in one and orders the batches in the
other. On the command line a value is `--section.field value` (or `--section.field=value`),
read by its field's type (`read_value`; YAML only in the files). Overrides travel as nested dicts
(`{"training": {"max_steps": 20}}`), applied to the sections by `RunConfig.with_overrides`;
null removes a field (`--model.norm_placement null`: its default applies).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import AutoConfig, HfArgumentParser, PretrainedConfig, TrainingArguments
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

import hmm_datasets
from hmm_datasets import HMMMixtureConfig
from hmm_datasets.config import AMBIGUITY_LEVELS
from hmm_datasets.corpus import check_model_fits_corpus
from hmm_datasets.export import local_folder
from hmm_datasets.windows import check_memories
from probing.architecture import HMM_ROFORMER
from probing.config import PatchingConfig, ProbeConfig

from ..configuration_hmm_roformer import HMMRoFormerConfig
from .fields import (
    SECTIONS,
    DataSection,
    RunSection,
    accepted_types,
    did_you_mean,
    run_config_problems,
    section_fields,
    unknown_sections,
)
from .names import RUN_CONFIG_YAML

# HMM_ROFORMER (probing.architecture): the model a run trains unless model.model_type names another


def _configs_dir() -> Path:
    """The run configs of the named pipelines: the copy a wheel carries inside this package
    (pyproject.toml maps the clone's configs/ there), else the clone's configs/."""
    here = Path(__file__).resolve().parent
    return here / "configs" if (here / "configs").is_dir() else here.parents[1] / "configs"


CONFIGS_DIR = _configs_dir()
# The task-diversity study's prior-level yardstick: N state paths per row. Two particle sets of
# N = 65,536 differ by 0.008-0.013 nats/token on 128 rows of small's prior (N = 16,384: 0.0156 on
# 32 rows); about a minute per corpus on an H100, about 50 minutes on 2 CPU cores (docs/study.md).
DIVERSITY_PARTICLES = 65536


# The inference study's networks probed over training, of the 13 it keeps (0, 50, 82, 135, 223,
# 367, 604, 994, 1635, 2692, 4430, 7291, 12000): before the in-context transition, during it,
# after it and at the end, as the calibration run on diversity-8192 placed them (docs/study.md).
INFERENCE_PROBED_STEPS = (604, 994, 2692, 12000)


ANALYSIS = "analysis"  # a preset file's section beside the run config's: the sizes of its analyses
NOT_ANALYSIS_SIZES = ("name", "run_config", "overrides", "depths", "seeds", "seeds_per_depth")


# ---- YAML 1.2 and the override syntax ---------------------------------------------------------
class _Yaml12Loader(yaml.SafeLoader):
    """YAML 1.2 scalars: only true/false are booleans (`eval_strategy: no` stays "no", which
    TrainingArguments expects) and `3e-4` is a float (YAML 1.1 reads both otherwise)."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:float")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def read_yaml(text: str) -> Any:
    """A YAML document with YAML 1.2 scalars (see `_Yaml12Loader`)."""
    return yaml.load(text, Loader=_Yaml12Loader)


def parse_overrides(arguments: list[str], sections: tuple[str, ...] = SECTIONS) -> dict[str, dict[str, Any]]:
    """`["--model.num_hidden_layers", "8", "--training.learning_rate=3e-4"]` ->
    `{"model": {"num_hidden_layers": 8}, "training": {"learning_rate": 0.0003}}`."""
    out: dict[str, dict[str, Any]] = {}
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        if not argument.startswith("--") or "." not in argument:
            raise ValueError(
                f"cannot read {argument!r}: write overrides as --section.field value, e.g. "
                f"--{sections[0]}.<field> <value> (sections: {', '.join(sections)})."
            )
        if "=" in argument:
            key, raw = argument[2:].split("=", 1)
            index += 1
        else:
            if index + 1 >= len(arguments):
                raise ValueError(f"override {argument} has no value.")
            key, raw = argument[2:], arguments[index + 1]
            index += 2
        section, name = key.split(".", 1)
        if section not in sections:
            near = did_you_mean(section, sections)
            raise ValueError(
                f"override --{key}: unknown section {section!r}{near}; sections are {', '.join(sections)}."
            )
        out.setdefault(section, {})[name] = read_value(raw, section_fields().get(section, {}).get(name))
    return out


_BOOLEANS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}


def read_value(raw: str, annotation) -> Any:
    """A command-line value read by its field's type, as transformers' HfArgumentParser reads
    one: `null` removes the field (its default applies); otherwise the first of the field's
    types the text reads as, in the order boolean (`true`/`false`), integer, number, list or
    mapping (JSON), string. So a string field keeps the text as typed (`--training.run_name 123`
    is "123", `--training.eval_strategy no` is "no"), and `--training.report_to []` is a list. A
    field whose type is not known here (another architecture's) takes any of them; text that
    reads as none of the field's types stays text, for the run config's check to name the type
    it needs."""
    if raw == "null":
        return None
    accepted = accepted_types(annotation) or {bool, int, float, list, dict, str}
    if bool in accepted and raw in _BOOLEANS:
        return _BOOLEANS[raw]
    if int in accepted and re.fullmatch(r"[-+]?[0-9]+", raw):
        return int(raw)
    if float in accepted:
        with contextlib.suppress(ValueError):
            return float(raw)
    if accepted & {list, dict}:
        with contextlib.suppress(ValueError):
            value = json.loads(raw)
            if type(value) in accepted:
                return value
    return raw


def merge_overrides(*layers: dict[str, dict]) -> dict[str, dict]:
    """Nested overrides, later layers winning field by field."""
    merged: dict[str, dict] = {}
    for layer in layers:
        for section, fields in (layer or {}).items():
            merged.setdefault(section, {}).update(fields)
    return merged


def apply_overrides(sections: dict[str, dict], overrides: dict[str, dict]) -> dict[str, dict]:
    """`sections` with `overrides` applied field by field; a field overridden with None (YAML's
    null: `--model.norm_placement null`) is removed, so that its default applies."""
    applied = merge_overrides(sections, overrides)
    for section, fields in (overrides or {}).items():
        for name, value in fields.items():
            if value is None:
                applied[section].pop(name, None)
    return applied


# ---- the run config ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RunConfig:
    """The five sections of a run, validated at construction (see the module docstring)."""

    corpus: dict
    data: dict
    model: dict
    training: dict
    run: dict

    def __post_init__(self) -> None:
        problems = run_config_problems(self.to_dict())
        if problems:
            raise ValueError("; ".join(problems))
        if self.model.get("attn_implementation") == "flex_attention" and self.trains_on_cpu:
            raise ValueError(
                "model.attn_implementation='flex_attention' is refused on a CPU: torch's CPU kernel gives "
                "wrong values. Pass --model.attn_implementation sdpa (or eager), or train on a GPU."
            )
        try:  # the corpus and the model, as training will build them: their own checks, now
            corpus = self.corpus_config()
        except Exception as error:
            raise ValueError(f"corpus section: {' '.join(str(error).split())}") from error
        try:
            self.model_config(corpus)
        except Exception as error:
            raise ValueError(f"model section: {' '.join(str(error).split())}") from error

    @property
    def trains_on_cpu(self) -> bool:
        return bool(self.training.get("use_cpu")) or not torch.cuda.is_available()

    @functools.cached_property
    def data_section(self) -> DataSection:
        """The `data:` section with its defaults, typed (by transformers' `HfArgumentParser`)."""
        return HfArgumentParser(DataSection).parse_dict(self.data)[0]

    @functools.cached_property
    def run_section(self) -> RunSection:
        """The `run:` section with its defaults, typed (by transformers' `HfArgumentParser`)."""
        return HfArgumentParser(RunSection).parse_dict(self.run)[0]

    @property
    def output_dir(self) -> Path:
        return Path(self.training["output_dir"])

    @property
    def seed(self) -> int:
        return int(self.training.get("seed", 42))  # TrainingArguments' default

    @property
    def model_type(self) -> str:
        return self.model.get("model_type", HMM_ROFORMER)

    @property
    def depth(self) -> int:
        return int(self.model.get("num_hidden_layers", HMMRoFormerConfig.num_hidden_layers))

    def corpus_config(self) -> HMMMixtureConfig:
        overrides = {key: value for key, value in self.corpus.items() if key != "preset"}
        return hmm_datasets.get_preset(self.corpus["preset"], **overrides)

    def model_sizes(self) -> dict:
        """The `model:` section's config fields, with its model type (without the attention backend)."""
        return {key: value for key, value in self.model.items() if key != "attn_implementation"}

    def model_config(self, corpus_config: HMMMixtureConfig | None = None) -> PretrainedConfig:
        """The `model:` section, typed: the model's config, sized to read the corpus (`config_for_corpus`)."""
        corpus = self.corpus_config() if corpus_config is None else corpus_config
        return config_for_corpus(corpus, **self.model_sizes())

    @property
    def attn_implementation(self) -> str:
        """The attention backend the model trains with (`model.attn_implementation`, sdpa by default)."""
        return self.model.get("attn_implementation", "sdpa")

    def training_arguments(self) -> TrainingArguments:
        """The `training:` section, typed: transformers' `TrainingArguments` (its own checks run),
        with the dataset's columns kept (the collator reads `segment_ids`)."""
        return TrainingArguments(**{"remove_unused_columns": False, **self.training})

    def with_depth(self, depth: int) -> RunConfig:
        """The run config at `depth` layers, written where the depth lives: the model section's
        `num_hidden_layers` (validated again)."""
        return dataclasses.replace(self, model={**self.model, "num_hidden_layers": depth})

    def with_overrides(self, overrides: dict[str, dict]) -> RunConfig:
        """A new run config with `{section: {field: value}}` applied (validated again)."""
        return RunConfig(**apply_overrides(self.to_dict(), overrides))

    def to_dict(self) -> dict[str, dict]:
        return {section: copy.deepcopy(getattr(self, section)) for section in SECTIONS}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# ---- the model a run config builds --------------------------------------------------------------
def config_for_corpus(
    corpus_config: HMMMixtureConfig, model_type: str = HMM_ROFORMER, **sizes
) -> PretrainedConfig:
    """A model config whose vocabulary and positions fit the corpus, with the given sizes: an
    `HMMRoFormerConfig` (any of its fields), or the config of another transformers model type
    (`architecture_config`); a model that cannot read the corpus is refused."""
    positions = max(HMMRoFormerConfig.max_position_embeddings, corpus_config.sequence_length)
    values = {"vocab_size": corpus_config.model_vocab_size, "max_position_embeddings": positions, **sizes}
    if model_type == HMM_ROFORMER:
        config = HMMRoFormerConfig(**values)
    else:
        config = architecture_config(model_type, values)
    check_model_fits_corpus(config, corpus_config)
    return config


def architecture_config(model_type: str, values: dict) -> PretrainedConfig:
    """The config of transformers' causal LM `model_type` with `values` (the run's sizes): a field
    its config does not have is refused; the MLP width defaults to 4 x the width and the key/value
    heads to the query heads, as HMMRoFormer has them (not the architecture's own defaults, sized
    for billions of parameters); no token is special."""
    try:
        blank = AutoConfig.for_model(model_type)
    except ValueError:
        raise ValueError(
            f"model_type={model_type!r} is not a model type transformers knows: use {HMM_ROFORMER!r} or a causal "
            "LM such as 'llama', 'qwen2' or 'gpt2'"
        ) from None
    if type(blank) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ValueError(
            f"model_type={model_type!r} has no causal-LM model in transformers: choose a causal LM"
        )
    foreign = sorted(name for name in values if not hasattr(blank, name))
    if foreign:
        raise ValueError(
            f"model.{foreign[0]} does not apply to a {model_type!r} model (its config has no such field): remove "
            f"{', '.join(f'model.{name}' for name in foreign)} from the run config"
        )
    like_hmm_roformer = {  # what the run leaves out: as HMMRoFormer has it, not the architecture's defaults
        "intermediate_size": ("hidden_size", 4),  # the MLP 4 x the width
        "num_key_value_heads": ("num_attention_heads", 1),  # a key/value head per query head
    }
    for name, (source, factor) in like_hmm_roformer.items():
        if hasattr(blank, name) and name not in values and source in values:
            values = {**values, name: factor * values[source]}
    tokens = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    config = AutoConfig.for_model(model_type, **{**tokens, **values})
    check_heads(config)
    return config


def check_heads(config: PretrainedConfig) -> None:
    """`ValueError` for heads that do not split the width, or query heads that key/value heads do
    not divide (what transformers' configs leave to the first forward pass)."""
    heads, width = config.num_attention_heads, config.hidden_size
    if getattr(config, "head_dim", None) is None and width % heads:
        raise ValueError(f"hidden_size={width} is not divisible by num_attention_heads={heads}")
    groups = getattr(config, "num_key_value_heads", None)
    if groups is not None and (groups < 1 or heads % groups):
        raise ValueError(
            f"num_key_value_heads={groups} does not divide num_attention_heads={heads}: each key/value head "
            "serves a whole number of query heads"
        )


def load_run_config(
    path: str | os.PathLike, overrides: dict[str, dict] | list[str] | None = None
) -> RunConfig:
    """Read a run YAML and apply overrides: nested `{section: {field: value}}`, or the command
    line's `--section.field value` list."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"no run config at {path}: pass --config configs/<preset>.yaml (tiny, small or paper)."
        )
    values = read_yaml(path.read_text()) or {}
    values.pop(ANALYSIS, None)  # a preset's analysis sizes: the pipeline's (`preset_settings`), not the run's
    problem = unknown_sections(values)
    if problem:
        raise ValueError(f"{path}: {problem}.")
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    sections = {section: dict(values.get(section) or {}) for section in SECTIONS}
    return RunConfig(**apply_overrides(sections, overrides or {}))


def checkpoint_seed(model: str) -> int:
    """The seed a checkpoint (folder or Hub id) was trained with, from the run config it carries;
    the Trainer's default 42 when it carries none."""
    path = local_folder(model, "model", [RUN_CONFIG_YAML]) / RUN_CONFIG_YAML
    if not path.is_file():
        return 42
    return int((read_yaml(path.read_text()).get("training") or {}).get("seed", 42))


# ---- the pipelines ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """What a pipeline runs (validated): a run config, the grid of models trained from it, and
    the sizes of the analyses. A reproduction is a pipeline of one model at the run config's own
    depth and seed (`depths` and `seeds` empty); a study trains every depth x seed."""

    name: str
    run_config: str  # file name in configs/
    depths: tuple[int, ...] = ()  # numbers of layers; empty: the run config's own
    seeds: tuple[int, ...] = ()  # training seeds; empty: the run config's own
    seeds_per_depth: dict = field(
        default_factory=dict
    )  # {depth: n}: that depth trains only the first n seeds
    overrides: dict = field(default_factory=dict)  # {section: {field: value}} of the run config
    eval_rows: int = 512  # test rows of Figure 1
    corpus_table_rows: int = 512  # test rows of the Bayes-optimal table on the dataset card
    memories: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # Lemma 1's memories L
    memory_rows: int = 128  # test rows of Lemma 1 and of the model's memory
    probe: dict = field(default_factory=dict)  # ProbeConfig fields that differ from the defaults
    yardstick_rows: int = 128  # rows of each test split the yardsticks predict (corpora with test_unseen)
    prior_particles: int = 16384  # N: state paths per row of the prior-level yardstick (particle learning)
    development_probes: tuple[int, ...] = ()  # kept steps (run.checkpoints) whose networks are probed too
    lemma1: bool = True  # Lemma 1 on the corpus and each model's memory against it (no claim reads them)
    # each model's activation patching and its twin's (probing.patching, docs/patching.md): None,
    # not run; else the PatchingConfig fields that differ from the defaults ({}: none)
    patching: dict | None = None

    def __post_init__(self) -> None:
        for name in ("depths", "seeds", "memories", "development_probes"):
            values = tuple(getattr(self, name))
            object.__setattr__(self, name, values)
            if any(not isinstance(v, int) for v in values):
                raise ValueError(f"{name}={list(values)} must be integers.")
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"{name} {repeated} given twice: give each once ({name}={list(values)}).")
        if self.depths and min(self.depths) < 2:
            raise ValueError(
                f"depths={list(self.depths)}: every model needs at least 2 layers (the shuffle test "
                "compares its upper with its lower layers)."
            )
        if self.seeds and min(self.seeds) < 0:
            raise ValueError(f"seeds={list(self.seeds)} must be >= 0.")
        for depth, count in self.seeds_per_depth.items():
            if not isinstance(count, int) or count < 1:
                raise ValueError(
                    f"seeds_per_depth[{depth}]={count!r} must be a positive integer (that depth's first n seeds)."
                )
        if self.memories and min(self.memories) < 1:
            raise ValueError(f"memories={list(self.memories)}: a memory L keeps at least 1 token (L >= 1).")
        check_memories(self.memories)
        for name in ("eval_rows", "memory_rows", "yardstick_rows", "prior_particles"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1.")
        if not isinstance(self.lemma1, bool):
            raise ValueError(f"lemma1={self.lemma1!r} must be true or false.")
        if self.corpus_table_rows < 0:
            raise ValueError(f"corpus_table_rows={self.corpus_table_rows} must be 0 or more.")
        problem = unknown_sections(self.overrides)
        if problem:
            raise ValueError(f"overrides name {problem}.")
        layers = self.probe.get("layers")
        if layers is not None and self.depths and max(layers) > min(self.depths):
            raise ValueError(
                f"probe layers {list(layers)} ask for more layers than the shallowest model has "
                f"({min(self.depths)}): leave probe layers out (all layers of every model) or use "
                f"hidden-state indices up to {min(self.depths)}."
            )
        ProbeConfig(**self.probe)  # its own checks, early
        if self.patching is not None:
            PatchingConfig(**self.patching)

    @property
    def is_grid(self) -> bool:
        """Depths or seeds of its own (even one of each): a study, not one reproduction."""
        return bool(self.depths or self.seeds)

    def seeds_of(self, depth: int) -> tuple[int, ...]:
        """The seeds trained at `depth`: all of `seeds`, or the first n of `seeds_per_depth`."""
        return self.seeds[: self.seeds_per_depth.get(depth, len(self.seeds))]

    def probe_config(self) -> ProbeConfig:
        return ProbeConfig(**self.probe)

    def patching_config(self) -> PatchingConfig | None:
        """The models' patching settings, None where the pipeline does not patch."""
        return None if self.patching is None else PatchingConfig(**self.patching)

    def replace(self, **changes) -> Settings:
        """These settings with fields changed; `overrides` are added to the settings' own."""
        changes = {key: value for key, value in changes.items() if value is not None}
        if "overrides" in changes:
            changes["overrides"] = merge_overrides(self.overrides, changes["overrides"])
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def shaped_settings(settings: Settings, run: RunConfig, grid: bool = True) -> dict:
    """Every setting that shapes the results: the pipeline's and its run config's, but not where
    the folders lie nor whether progress bars show. Without `grid`, the grid's depths and seeds
    are left out too: what a model's record and a study folder's shared stages depend on, so that
    a study run a few depths or seeds at a time (`--depths 4`, then `--depths 16`) shares them."""
    sections = run.to_dict()
    sections["data"].pop("source", None)
    for key in ("output_dir", "disable_tqdm"):
        sections["training"].pop(key, None)
    shaped = settings.to_dict()
    shaped.pop("lemma1")  # whether Lemma 1 and the memories run changes no other number
    added_later = {
        "seeds_per_depth": {},
        "yardstick_rows": 128,
        "prior_particles": 16384,
        "development_probes": (),
        "patching": None,
    }
    for name, default in added_later.items():  # left out at their defaults, so older folders still match
        if shaped[name] == default:
            del shaped[name]
    if not grid:
        for name in ("depths", "seeds", "seeds_per_depth"):
            shaped.pop(name, None)
    return {"settings": shaped, "run": sections}


def fingerprint(settings: Settings, run: RunConfig, grid: bool = True) -> str:
    """A hash of `shaped_settings`: equal fingerprints, equal results."""
    record = shaped_settings(settings, run, grid)
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]


def flat_settings(settings: Settings, run: RunConfig, grid: bool = False) -> dict[str, object]:
    """`shaped_settings`, one dotted name per value ("run.corpus.seed": 0) as JSON keeps them:
    what a state file and a record carry to say which setting differs."""
    flat: dict[str, object] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict) and value:
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        else:
            flat[prefix] = json.loads(json.dumps(value, default=str))

    walk("", shaped_settings(settings, run, grid))
    return flat


def preset_settings(name: str) -> Settings:
    """The reproduction preset `name`: one file, configs/<name>.yaml, whose run config sections
    are the run's and whose `analysis:` section sizes its analyses (`Settings`' fields; the
    defaults where it has none)."""
    path = CONFIGS_DIR / f"{name}.yaml"
    sizes = (read_yaml(path.read_text()) or {}).get(ANALYSIS) or {}
    known = [f.name for f in dataclasses.fields(Settings) if f.name not in NOT_ANALYSIS_SIZES]
    unknown = [key for key in sizes if key not in known]
    if unknown:
        hint = did_you_mean(unknown[0], known, prefix=f"{ANALYSIS}.")
        raise ValueError(f"{path}: unknown field(s) {unknown} in section '{ANALYSIS}'{hint}.")
    return Settings(name, path.name, **sizes)


# HMM draws per K of the inference study's design that decides (docs/study.md): at 4 layers; the
# 16-layer cell at K = 8192 grows to DEEP_DECIDING_DRAWS
DECIDING_DRAWS = {32: 7, 512: 12, 8192: 12}
DEEP_DECIDING_DRAWS = 5
PATCHED_FROM_DRAW = 5  # the first draw whose models carry activation patching (docs/patching.md)
# The cells where the token hides the state (docs/study.md, written before their runs): K = 8192 at
# each emission mixing of hmm_datasets.AMBIGUITY_LEVELS, this many HMM draws, every model patched.
AMBIGUOUS_DRAWS = 12


def inference_cell(
    num_tasks: int,
    draw: int,
    seeds: tuple[int, ...],
    lemma1: bool = True,
    patching: dict | None = None,
    emission_mixing: float = 0.0,
) -> Settings:
    """One HMM draw of the inference study at K = `num_tasks`, 4 layers (docs/study.md): the
    4-layer model trained past its in-context transition under configs/inference.yaml, keeping
    13 networks over training, on corpus seed `draw`. The prior-level yardstick at N = 16,384
    particles (about 40 minutes of one CPU core per corpus; a GPU does 65,536 in one). Without
    `lemma1`, neither Lemma 1 nor the models' memory runs (no claim reads them); with `patching`
    (PatchingConfig fields), each model's activation patching runs (docs/patching.md). With
    `emission_mixing` (one of `AMBIGUITY_LEVELS`), the corpus is the `ambiguous-<K>-m<100 m>`
    preset, the same HMM draws with a token that hides the state, and the study is named
    `inference-<K>-m<100 m>-draw<d>`."""
    level = f"-m{round(100 * emission_mixing)}" if emission_mixing else ""
    preset = f"ambiguous-{num_tasks}{level}" if emission_mixing else f"diversity-{num_tasks}"
    return Settings(
        f"inference-{num_tasks}{level}-draw{draw}",
        "inference.yaml",
        depths=(4,),
        seeds=seeds,
        overrides={"corpus": {"preset": preset, "seed": draw}},
        corpus_table_rows=128,
        development_probes=INFERENCE_PROBED_STEPS,
        lemma1=lemma1,
        patching=patching,
    )


# Every named pipeline: `scripts/reproduce.py --preset NAME` runs the one-model ones,
# `scripts/study.py --study NAME` any of them. The run config names the corpus preset, the
# model's sizes and the training; the entry adds the grid and the analyses' sizes.
PIPELINES = {
    settings.name: settings
    for settings in (
        *(preset_settings(name) for name in ("tiny", "small", "paper")),  # one file each: configs/
        # The depth-and-seed study: the paper's depth at CPU width, on the CPU demo's corpus; six
        # seeds (what the decision rule needs) at 4 and 16 layers, three at 2 and 8 (training time).
        Settings(
            "default",
            "study.yaml",
            depths=(2, 4, 8, 16),
            seeds=(0, 1, 2, 3, 4, 5),
            seeds_per_depth={2: 3, 8: 3},
            corpus_table_rows=128,
        ),
        # The task-diversity study (docs/study.md): the default study's models at 4 and 16 layers, six
        # seeds, on `small`'s prior with K = 32, 512 and 8192 HMMs (65,536 training rows: about 2,048,
        # 128 and 8 per HMM), each placed between retrieval and inference on seen and unseen tasks;
        # and a second HMM draw (corpus seed 1) at K = 512, 4 layers.
        *(
            Settings(
                f"diversity-{k}",
                "study.yaml",
                depths=(4, 16),
                seeds=(0, 1, 2, 3, 4, 5),
                overrides={"corpus": {"preset": f"diversity-{k}"}},
                corpus_table_rows=128,
                prior_particles=DIVERSITY_PARTICLES,
            )
            for k in (32, 512, 8192)
        ),
        # The architecture comparison: the diversity-32 study's 4-layer models as a Llama of the same
        # sizes (norm_placement is HMMRoFormer's own field: removed).
        Settings(
            "architecture-llama",
            "study.yaml",
            depths=(4,),
            seeds=(0, 1, 2, 3, 4, 5),
            overrides={
                "corpus": {"preset": "diversity-32"},
                "model": {"model_type": "llama", "norm_placement": None},
            },
            corpus_table_rows=128,
            prior_particles=DIVERSITY_PARTICLES,
        ),
        Settings(
            "diversity-512-draw1",
            "study.yaml",
            depths=(4,),
            seeds=(0, 1, 2, 3, 4, 5),
            overrides={"corpus": {"preset": "diversity-512", "seed": 1}},
            corpus_table_rows=128,
            prior_particles=DIVERSITY_PARTICLES,
        ),
        # The inference study (docs/study.md): K = 32, 512 and 8192; three HMM draws of each (corpus
        # seeds 0-2), two training seeds per draw (2d and 2d + 1: no initialisation shared across draws).
        *(inference_cell(k, draw, (2 * draw, 2 * draw + 1)) for k in (32, 512, 8192) for draw in (0, 1, 2)),
        # The design that decides (docs/study.md, chosen by benchmarks/power.py before its runs): each
        # K grown to DECIDING_DRAWS HMM draws, one training seed per new draw (2d: still no
        # initialisation shared across draws) and no Lemma 1 (no claim reads it: 40 minutes of a core
        # per K = 8192 draw); the 16-layer K = 8192 models of draws 3 and 4 train in those draws'
        # folders (`--depths 16`). From draw PATCHED_FROM_DRAW on, each model is patched too
        # (docs/patching.md: the claim it is to decide, written before any record carries it).
        *(
            inference_cell(
                k, draw, (2 * draw,), lemma1=False, patching={} if draw >= PATCHED_FROM_DRAW else None
            )
            for k, draws in DECIDING_DRAWS.items()
            for draw in range(3, draws)
        ),
        # The cells where the token hides the state (docs/study.md, written before their runs): K =
        # 8192 at each emission mixing, AMBIGUOUS_DRAWS draws of one model (seed 2d), patched, no Lemma 1.
        *(
            inference_cell(8192, draw, (2 * draw,), lemma1=False, patching={}, emission_mixing=mixing)
            for draw in range(AMBIGUOUS_DRAWS)
            for mixing in AMBIGUITY_LEVELS
        ),
        # The test suite's end-to-end study: seconds on 2 cores.
        Settings(
            "quick",
            "tiny.yaml",
            depths=(2, 3),
            seeds=(0, 1),
            overrides={
                "training": {"max_steps": 20, "eval_steps": 10, "save_steps": 10},
                "corpus": {"num_test_unseen": 16},  # the yardsticks stage, on seen and unseen tasks
            },
            eval_rows=32,
            yardstick_rows=16,
            prior_particles=64,
            corpus_table_rows=16,
            memories=(1, 2, 4),
            memory_rows=16,
            probe={
                "num_probe_tasks": 4,
                "rows_per_task": 8,
                "positions_per_row": None,  # every position: demonstration 1 has enough for its belief maps
                "distances": (1, 2),
                "num_resamples": 50,
                "shuffle_rows": 16,
                "max_iter": 20,
            },
            patching={"num_tasks": 4, "rows_per_task": 4},
        ),
    )
}
REPRODUCTIONS = sorted(name for name, settings in PIPELINES.items() if not settings.is_grid)


def get_settings(name: str, **changes) -> Settings:
    """A named pipeline (`PIPELINES`) with fields changed (`Settings.replace`)."""
    if name not in PIPELINES:
        raise ValueError(f"{name!r} is not a named pipeline; choose one of {sorted(PIPELINES)}.")
    return PIPELINES[name].replace(**changes)


def pipeline_run_config(settings: Settings, configs_dir: str | os.PathLike = CONFIGS_DIR) -> RunConfig:
    """A pipeline's run config: its file in `configs_dir` with its overrides applied."""
    return load_run_config(Path(configs_dir) / settings.run_config, settings.overrides)


def record_fingerprint(name: str) -> str:
    """What the record of a model of the named pipeline carries (`fingerprint` without the grid):
    equal for every depth and seed it trains."""
    settings = get_settings(name)
    return fingerprint(settings, pipeline_run_config(settings), grid=False)
