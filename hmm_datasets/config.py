"""`HMMMixtureConfig`: every number that defines a mixture-of-HMMs corpus, validated.

The config is a `datasets.BuilderConfig`, so the named presets are the builder's
`BUILDER_CONFIGS` and any field can be overridden from `load_dataset`:

    load_dataset("hmm_mixture", "small", num_tasks=32)
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np

# `test_unseen` is last: a split's row streams are keyed by its index here (`sampler.block_rng`),
# so appending keeps every other split's rows byte for byte.
SPLITS = ("train", "validation", "test", "test_unseen")
# Bump when the generating code changes what a seed produces (part of the cache key,
# together with a hash of the generating modules' source, see `hmm_mixture.py`).
GENERATOR_VERSION = datasets.Version("1.0.0")
# Fields that only name or locate a config; they do not change the data.
_BUILDER_FIELDS = {field.name for field in dataclasses.fields(datasets.BuilderConfig)}


def _field(default, help: str):
    """A config field with its one line of help (`field_help`; the run config's `--help` shows it)."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass
class HMMMixtureConfig(datasets.BuilderConfig):
    """A mixture of `num_tasks` random HMMs and the in-context layout of its rows.

    A row is `demo_1 <delim> ... demo_N <delim> test`: `num_demos` demonstrations of
    `demo_length` observations, each followed by the delimiter (id `vocab_size`), then
    a test sequence of `test_length` observations. Every segment restarts the HMM.

    HMM parameters are drawn per task from symmetric Dirichlet distributions. With
    `transition_rank = d`, transitions are `left @ right` with row-stochastic factors
    `left [S, d]` and `right [d, S]` (the paper's Assumption 1); otherwise each
    transition row is drawn directly.
    """

    version: datasets.Version | str | None = GENERATOR_VERSION
    num_tasks: int = _field(32, "HMMs in the mixture (K)")
    num_states: int = _field(16, "hidden states of each HMM (S)")
    vocab_size: int = _field(16, "observation tokens 0..V-1 (V); the delimiter is token V")
    num_demos: int = _field(4, "demonstrations per row (N)")
    demo_length: int = _field(16, "observations per demonstration (n)")
    test_length: int = _field(64, "observations in the test sequence (T)")
    num_train: int = _field(16384, "rows of the train split")
    num_validation: int = _field(1024, "rows of the validation split")
    num_test: int = _field(1024, "rows of the test split")
    num_test_unseen: int = _field(
        0, "rows of the test_unseen split, from fresh HMMs of the same prior (none in the mixture)"
    )
    initial_concentration: float = _field(1.0, "Dirichlet concentration of each HMM's initial distribution")
    transition_concentration: float = _field(0.1, "Dirichlet concentration of the transition rows")
    emission_concentration: float = _field(0.1, "Dirichlet concentration of the emission rows")
    emission_mixing: float = _field(
        0.0,
        "share of each emission row moved to the uniform distribution: 0 keeps the drawn rows; "
        "more hides the state behind the token (docs/corpus.md)",
    )
    transition_rank: int | None = _field(
        None, "rank d of the transitions (the paper's Assumption 1); null: full rank"
    )
    task_prior: tuple[float, ...] | None = _field(None, "probability of each task; null: uniform")
    seed: int = _field(0, "seed of the HMM parameters and the rows")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task_prior is not None:
            self.task_prior = tuple(float(p) for p in self.task_prior)
        self.validate()

    # ---- validation -------------------------------------------------------------
    def validate(self) -> None:
        """Raise `ValueError` naming the field, the value and the fix for any bad value."""
        for name in ("num_tasks", "num_states", "vocab_size", "demo_length", "test_length", "num_train"):
            _check_int(name, getattr(self, name), minimum=1, meaning=field_help(name))
        for name in ("num_demos", "num_validation", "num_test", "num_test_unseen", "seed"):
            _check_int(name, getattr(self, name), minimum=0, meaning=field_help(name))
        for name in ("num_states", "vocab_size"):
            if getattr(self, name) > 32767:
                raise ValueError(
                    f"{name}={getattr(self, name)} is too large: ids are stored as int16, "
                    "so use at most 32767."
                )
        for name in ("initial_concentration", "transition_concentration", "emission_concentration"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"{name}={value!r} must be a finite Dirichlet concentration > 0 "
                    "(small values give sparse, predictable HMMs; 1.0 is uniform)."
                )
        mixing = self.emission_mixing
        if not isinstance(mixing, (int, float)) or not math.isfinite(mixing) or not 0 <= mixing <= 1:
            raise ValueError(
                f"emission_mixing={mixing!r} must be a share between 0 and 1 (0 keeps the drawn "
                "emission rows; 1 makes every token independent of the state)."
            )
        if self.transition_rank is not None:
            _check_int("transition_rank", self.transition_rank, minimum=1, meaning="the rank d")
            if self.transition_rank > self.num_states:
                raise ValueError(
                    f"transition_rank={self.transition_rank} is larger than num_states="
                    f"{self.num_states}: a rank-d factorisation needs d <= S. Use a rank "
                    f"between 1 and {self.num_states}, or None for full-rank transitions."
                )
        if self.task_prior is not None:
            prior = np.asarray(self.task_prior, dtype=np.float64)
            if prior.shape != (self.num_tasks,):
                raise ValueError(
                    f"task_prior has {prior.size} entries but num_tasks={self.num_tasks}: "
                    "give one weight per task, or None for the uniform prior."
                )
            if not np.all(np.isfinite(prior)) or np.any(prior < 0) or prior.sum() <= 0:
                raise ValueError(
                    "task_prior must be non-negative finite weights with a positive sum "
                    f"(they are normalised); got min={prior.min()}, sum={prior.sum()}."
                )

    # ---- derived sizes ------------------------------------------------------------
    @property
    def delimiter(self) -> int:
        """Token id of the delimiter: `vocab_size`."""
        return self.vocab_size

    @property
    def model_vocab_size(self) -> int:
        """Tokens a model must know: observations plus the delimiter (V + 1)."""
        return self.vocab_size + 1

    @property
    def sequence_length(self) -> int:
        """Row length L = N * (n + 1) + T."""
        return self.num_demos * (self.demo_length + 1) + self.test_length

    def num_rows(self, split: str) -> int:
        """Rows of `split` (0: the corpus has no such split)."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not one of {SPLITS}.")
        return getattr(self, f"num_{split}")

    def task_prior_array(self) -> np.ndarray:
        """The normalised task prior, `[K]` float64 (uniform unless `task_prior` is set)."""
        if self.task_prior is None:
            return np.full(self.num_tasks, 1.0 / self.num_tasks)
        prior = np.asarray(self.task_prior, dtype=np.float64)
        return prior / prior.sum()

    # ---- serialisation -----------------------------------------------------------
    def generation_fields(self) -> dict[str, Any]:
        """The fields that decide the generated data (no builder bookkeeping)."""
        out = {}
        for field in dataclasses.fields(self):
            if field.name in _BUILDER_FIELDS:
                continue
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.generation_fields()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> HMMMixtureConfig:
        known = {field.name for field in dataclasses.fields(cls)} - (_BUILDER_FIELDS - {"name"})
        values = dict(values)
        # configs saved before the field went: the delimiter is always vocab_size (data contract)
        if values.get("delimiter_id", values.get("vocab_size")) in (None, values.get("vocab_size")):
            values.pop("delimiter_id", None)
        check_field_names(values, known)
        if values.get("task_prior") is not None:
            values["task_prior"] = tuple(values["task_prior"])
        return cls(**values)

    def replace(self, **overrides: Any) -> HMMMixtureConfig:
        """A validated copy with some fields changed (the name says it is custom)."""
        values = {**self.to_dict(), **overrides}
        if overrides and "name" not in overrides:
            values["name"] = f"{self.name}-custom"
        return HMMMixtureConfig.from_dict(values)


def check_field_names(names, known=None) -> None:
    """`ValueError` naming every name that is not an `HMMMixtureConfig` field (or not in `known`),
    each with the nearest field's name ("did you mean num_tasks?")."""
    known = (
        set(known) if known is not None else {field.name for field in dataclasses.fields(HMMMixtureConfig)}
    )
    unknown = sorted(set(names) - known)
    if not unknown:
        return
    phrases = []
    for name in unknown:
        near = difflib.get_close_matches(name, sorted(known), n=1)
        phrases.append(f"{name!r}" + (f" (did you mean {near[0]}?)" if near else ""))
    raise ValueError(
        f"unknown HMMMixtureConfig field(s) {', '.join(phrases)}; known fields: {', '.join(sorted(known))}."
    )


def field_help(name: str) -> str:
    """The one line that says what `HMMMixtureConfig.<name>` is."""
    return next(f.metadata["help"] for f in dataclasses.fields(HMMMixtureConfig) if f.name == name)


def _check_int(name: str, value: Any, *, minimum: int, meaning: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}={value!r} must be an integer: {name} is {meaning}.")
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}: {name} is {meaning}.")


# The presets. `tiny` is for tests (generates in milliseconds); `small` is the CPU demo;
# `paper` has the paper's sizes (K=8192, S=128, V=16, 131,072 train rows). The paper does
# not give its HMM distribution: dense random HMMs leave even the oracle that knows the task
# near chance, so both presets use sparse Dirichlet draws, which make the oracle
# and the Bayes-optimal predictor accurate; `paper` adds rank-16 transitions (the
# paper's Assumption 1). docs/bayes.md has their Bayes-optimal tables.
PRESETS: dict[str, HMMMixtureConfig] = {
    "tiny": HMMMixtureConfig(
        name="tiny",
        num_tasks=8,
        num_states=6,
        vocab_size=6,
        num_demos=4,
        demo_length=8,
        test_length=16,
        num_train=512,
        num_validation=64,
        num_test=64,
        transition_concentration=0.2,
        emission_concentration=0.2,
        seed=0,
    ),
    "small": HMMMixtureConfig(
        name="small",
        num_tasks=32,
        num_states=12,
        vocab_size=16,
        num_demos=8,
        demo_length=8,
        test_length=64,
        num_train=65536,
        num_validation=1024,
        num_test=1024,
        transition_concentration=0.03,
        emission_concentration=0.03,
        seed=0,
    ),
    "paper": HMMMixtureConfig(
        name="paper",
        num_tasks=8192,
        num_states=128,
        vocab_size=16,
        num_demos=16,
        demo_length=8,
        test_length=256,
        num_train=131072,
        num_validation=2048,
        num_test=2048,
        transition_concentration=0.003,
        emission_concentration=0.01,
        transition_rank=16,
        seed=0,
    ),
}


def _diversity_preset(num_tasks: int) -> HMMMixtureConfig:
    """`small`'s prior and layout with `num_tasks` HMMs, 65,536 train rows and 1024 rows of unseen
    HMMs: the task-diversity study (seen vs unseen tasks at 2048, 128, 8 train rows per HMM)."""
    name = f"diversity-{num_tasks}"
    overrides = {"name": name, "num_tasks": num_tasks, "num_train": 65536, "num_test_unseen": 1024}
    return HMMMixtureConfig.from_dict({**PRESETS["small"].to_dict(), **overrides})


PRESETS.update({f"diversity-{k}": _diversity_preset(k) for k in (32, 512, 8192)})

AMBIGUITY_LEVELS = (0.25, 0.5)  # emission_mixing of the corpora where the token hides the state


def _ambiguous_preset(num_tasks: int, mixing: float) -> HMMMixtureConfig:
    """`diversity-<num_tasks>` with `emission_mixing` = `mixing`: the same HMM draws, each emission
    row moved that share towards the uniform, so the current token tells less about the state
    (`hmm_datasets.ambiguity`; docs/corpus.md)."""
    name = f"ambiguous-{num_tasks}-m{round(100 * mixing)}"
    return PRESETS[f"diversity-{num_tasks}"].replace(name=name, emission_mixing=mixing)


PRESETS.update({p.name: p for p in (_ambiguous_preset(8192, m) for m in AMBIGUITY_LEVELS)})


def get_preset(name: str, **overrides: Any) -> HMMMixtureConfig:
    """A named preset, optionally with fields overridden (validated)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
    preset = PRESETS[name]
    return preset.replace(**overrides) if overrides else HMMMixtureConfig.from_dict(preset.to_dict())
