"""What a run config may hold: every field of every section with its type, the checks of the
values (all problems at once, with the nearest known name for a misspelt field), and the
reference of every field that `scripts/train.py --help` prints (docs/fields.md).

Each section's fields are a dataclass's: `HMMMixtureConfig` (corpus), `HMMRoFormerConfig` or
another transformers config (model), `TrainingArguments` (training), and this project's own
`DataSection` and `RunSection` below, whose fields carry their default and their one line of
help (so transformers' `HfArgumentParser` reads them) and whose `__post_init__` checks their
bounds.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import re
import types
import typing
from typing import Any, Literal

import torch
from transformers import TrainingArguments

import hmm_datasets
from hmm_datasets import HMMMixtureConfig

from ..configuration_hmm_roformer import HMMRoFormerConfig

SECTIONS = ("corpus", "data", "model", "training", "run")


def _field(default, help: str):
    """A section field with its one line of help (what transformers' `HfArgumentParser` reads)."""
    return dataclasses.field(default=default, metadata={"help": help})


def below_minimum(section: str, values: dict[str, Any], minimums: dict[str, int]) -> list[str]:
    """One phrase per value of `values` below its lowest value in `minimums` (None: unset)."""
    return [
        f"{section}.{name}={values[name]!r} must be at least {lowest}"
        for name, lowest in minimums.items()
        if values[name] is not None and values[name] < lowest
    ]


def refuse_problems(problems: list[str]) -> None:
    """`ValueError` with every problem, `; `-separated, or nothing when there is none."""
    if problems:
        raise ValueError("; ".join(problems))


@dataclasses.dataclass(frozen=True)
class DataSection:
    """The run config's `data:` section: where the rows come from."""

    source: str = _field(
        "builder",
        "where the rows come from: builder (generate the corpus section), a corpus folder or a Hub dataset id",
    )
    num_proc: int | None = _field(None, "processes that generate the corpus")

    def __post_init__(self) -> None:
        refuse_problems(below_minimum("data", vars(self), {"num_proc": 1}))


@dataclasses.dataclass(frozen=True)
class RunSection:
    """The run config's `run:` section: this project's own settings of a training run."""

    loss_mask: Literal["all", "observations", "test"] = _field(
        "all", "which next tokens the loss counts: all, observations, test"
    )
    eval_rows: int = _field(256, "validation rows of the in-context evaluation (0: none)")
    vary_num_demos: bool = _field(False, "each train row keeps its last m ~ U{0..N} demonstrations")
    checkpoints: int = _field(
        0,
        "networks kept over training in training/development/: step 0 and log-spaced steps up to the last (0: none)",
    )
    first_checkpoint_step: int = _field(10, "the first log-spaced step a network is kept at")

    def __post_init__(self) -> None:
        minimums = {"eval_rows": 0, "checkpoints": 0, "first_checkpoint_step": 1}
        refuse_problems(below_minimum("run", vars(self), minimums))


OWN_SECTIONS = {"data": DataSection, "run": RunSection}
_CORPUS_EXCLUDED = {"name", "version", "data_dir", "data_files", "description"}  # the builder's own


def _annotations(cls) -> dict[str, Any]:
    """Each dataclass field's type, resolved (`typing.get_type_hints`; transformers' configs
    annotate `dtype` with the name torch.dtype, which their modules import only to type-check)."""
    hints = typing.get_type_hints(cls, localns={"torch": torch})
    return {field_.name: hints[field_.name] for field_ in dataclasses.fields(cls)}


@functools.cache
def section_fields() -> dict[str, dict[str, Any]]:
    """Every field of every section and its type: what `--section.field value` may set."""
    corpus = {k: v for k, v in _annotations(HMMMixtureConfig).items() if k not in _CORPUS_EXCLUDED}
    return {
        "corpus": {"preset": str, **corpus},
        "data": _annotations(DataSection),
        "model": {**_annotations(HMMRoFormerConfig), "attn_implementation": str, "model_type": str},
        "training": _annotations(TrainingArguments),
        "run": _annotations(RunSection),
    }


BOUNDS = {  # training field -> (lowest value, whether it is allowed); our own sections check theirs
    "max_steps": (1, True),
    "learning_rate": (0, False),
    "per_device_train_batch_size": (1, True),
    "per_device_eval_batch_size": (1, True),
    "gradient_accumulation_steps": (1, True),
    "warmup_steps": (0, True),
    "eval_steps": (0, False),
    "save_steps": (0, False),
    "logging_steps": (0, False),
}
_TYPE_NAMES = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a mapping",
    type(None): "null",
}


def accepted_types(annotation) -> set[type] | None:
    """The YAML value types a field of this annotation takes; None: not checked here."""
    if annotation is None:
        return None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [accepted_types(part) for part in typing.get_args(annotation)]
        return None if any(part is None for part in parts) else set().union(*parts)
    if annotation is type(None):
        return {type(None)}
    if annotation in (list, tuple) or origin in (list, tuple):
        return {list}
    if annotation is dict or origin is dict:
        return {dict}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {str}
    if origin is Literal:
        return {type(choice) for choice in typing.get_args(annotation)}
    if annotation is float:
        return {float, int}
    if annotation in (bool, int, str):
        return {annotation}
    return None


def _has_type(value, accepted: set[type]) -> bool:
    if isinstance(value, bool):  # YAML true/false: a bool, never a number
        return bool in accepted
    return isinstance(value, tuple(accepted))


def did_you_mean(name: str, known, prefix: str = "") -> str:
    """` (did you mean <prefix><nearest>?)` for the known name nearest to a misspelt `name`, or ""."""
    near = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f" (did you mean {prefix}{near[0]}?)" if near else ""


def unknown_sections(names) -> str | None:
    """The phrase for section names that are not run config sections (each with the nearest one),
    None when every name is a section."""
    unknown = [name for name in names if name not in SECTIONS]
    if not unknown:
        return None
    hints = "".join(did_you_mean(name, SECTIONS) for name in unknown)
    return f"unknown section(s) {unknown}{hints}; sections are {', '.join(SECTIONS)}"


def run_config_problems(sections: dict[str, dict]) -> list[str]:
    """Every problem of a run config's sections at once, one phrase each: an unknown field (with
    the nearest known name), a value of the wrong type, a value out of bounds (`BOUNDS`; our own
    sections' `__post_init__`), a missing field."""
    problems = []
    fields = section_fields()
    for section, values in sections.items():
        known, before = fields[section], len(problems)
        if (
            section == "model"
            and values.get("model_type", HMMRoFormerConfig.model_type) != HMMRoFormerConfig.model_type
        ):
            continue  # another architecture's fields: its own config checks them (settings.architecture_config)
        for name, value in values.items():
            if name not in known:
                if section == "model" and name == "preset":
                    problems.append(
                        "model.preset is not read any more: write the model's sizes in the model section "
                        "(hidden_size, num_hidden_layers, num_attention_heads, ...), as configs/small.yaml does"
                    )
                    continue
                hint = did_you_mean(name, known, prefix=f"{section}.")
                problems.append(f"unknown field(s) [{name!r}] in section '{section}'{hint}")
                continue
            accepted = accepted_types(known[name])
            if accepted is not None and not _has_type(value, accepted):
                expected = " or ".join(sorted(_TYPE_NAMES[t] for t in accepted if t in _TYPE_NAMES))
                problems.append(f"{section}.{name}={value!r} must be {expected}")
                continue
            choices = typing.get_args(known[name]) if typing.get_origin(known[name]) is Literal else ()
            if choices and value not in choices:
                problems.append(f"{section}.{name}={value!r} must be one of {choices}")
                continue
            bound = BOUNDS.get(name) if section == "training" else None
            if bound is not None and value is not None:
                lowest, allowed = bound
                if value < lowest or (value == lowest and not allowed):
                    problems.append(
                        f"{section}.{name}={value!r} must be {'at least' if allowed else 'above'} {lowest}"
                    )
        if section in OWN_SECTIONS and len(problems) == before:  # well typed: its own checks
            try:
                OWN_SECTIONS[section](**values)
            except ValueError as error:
                problems += str(error).split("; ")
    if sections["corpus"].get("preset") not in hmm_datasets.PRESETS:
        problems.append(
            f"corpus.preset={sections['corpus'].get('preset')!r} is not a corpus preset; choose one of "
            f"{sorted(hmm_datasets.PRESETS)}"
        )
    if "output_dir" not in sections["training"]:
        problems.append("training.output_dir is missing: say where the run writes its checkpoints")
    return problems


# ---- the reference, for --help and docs/fields.md -----------------------------------------------
_OWN_HELP = {
    "corpus": {  # the other fields' help lives with them (HMMMixtureConfig's field metadata)
        "preset": "the preset the other fields change: " + ", ".join(sorted(hmm_datasets.PRESETS)),
        **{
            field.name: field.metadata["help"]
            for field in dataclasses.fields(HMMMixtureConfig)
            if field.metadata
        },
    },
    "model": {
        "attn_implementation": "sdpa, eager, flash_attention_2 or flex_attention (flex: GPU only)",
        "model_type": "hmm_roformer (default) or a transformers causal LM: llama, qwen2, gpt2, ... (its fields)",
    },
    **{
        section: {field.name: field.metadata["help"] for field in dataclasses.fields(own)}
        for section, own in OWN_SECTIONS.items()
    },
}
_SECTION_TITLES = {
    "corpus": "the corpus (hmm_datasets.HMMMixtureConfig; defaults: the class's, a preset sets its own)",
    "data": "where the rows come from",
    "model": "the model (HMMRoFormerConfig; any other field of transformers' PreTrainedConfig too)",
    "training": "transformers.TrainingArguments",
    "run": "this project's own",
}


def _docstring_args(doc: str) -> dict[str, str]:
    """`name: text` entries of a Google-style Args section (`a, b: text` gives both)."""
    found, names = {}, []
    for line in doc.split("Args:", 1)[-1].split("```")[0].splitlines():
        head = re.match(r"^\s{8}([a-z_, ]+): (.*)$", line)
        if head:
            names = [name.strip() for name in head.group(1).split(",")]
            found.update(dict.fromkeys(names, head.group(2).strip()))
        elif line.startswith(" " * 12) and names:
            found.update({name: f"{found[name]} {line.strip()}" for name in names})
    return found


def _type_text(annotation) -> str:
    """`int`, `int | None`, `SchedulerType | str`, `'all' | 'test'`: the annotation without module
    prefixes (a Literal as its choices)."""
    if typing.get_origin(annotation) is Literal:
        return " | ".join(repr(choice) for choice in typing.get_args(annotation))
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return re.sub(r"\b[\w.]+\.(\w+)", r"\1", text).replace("NoneType", "None")


def fields_reference() -> str:
    """Every `--section.field` with its type, default and one line: what `--help` shows."""
    defaults = {
        "corpus": {f.name: f.default for f in dataclasses.fields(HMMMixtureConfig)},
        "model": {f.name: f.default for f in dataclasses.fields(HMMRoFormerConfig)},
        "training": {f.name: f.default for f in dataclasses.fields(TrainingArguments)},
        **{
            section: {f.name: f.default for f in dataclasses.fields(own)}
            for section, own in OWN_SECTIONS.items()
        },
    }
    model_help = _docstring_args(HMMRoFormerConfig.__doc__ or "")
    training_help = {
        f.name: " ".join(f.metadata.get("help", "").split()) for f in dataclasses.fields(TrainingArguments)
    }
    lines = []
    for section, fields in section_fields().items():
        helps = {**model_help, **_OWN_HELP["model"]} if section == "model" else _OWN_HELP.get(section, {})
        if section == "training":
            helps = training_help
        names = [name for name in fields if section != "model" or name in helps]
        lines += ["", f"{section}: {_SECTION_TITLES[section]}"]
        for name in names:
            default = defaults[section].get(name, dataclasses.MISSING)
            shown = "" if default is dataclasses.MISSING or callable(default) else f" = {default!r}"
            text = helps.get(name, "")
            text = text if len(text) <= 100 else text[:97].rsplit(" ", 1)[0] + " ..."
            lines.append(f"  --{section}.{name} ({_type_text(fields[name])}{shown})")
            if text:
                lines.append(f"      {text}")
    return "\n".join(lines[1:]) + "\n"


def fields_page() -> str:
    """docs/fields.md: `fields_reference` as a page (the test suite checks the committed one)."""
    return (
        "# Run config fields\n\n"
        "Every field a run config's sections take, as `--section.field value` on the command line of\n"
        "`scripts/train.py`, `scripts/reproduce.py` and `scripts/study.py` (`--help` prints this list)\n"
        "or as `field: value` in the section of a YAML file ([training](training.md)); `null` removes a\n"
        "field the file sets, which then takes its default (`--model.norm_placement null`). Generated\n"
        "from the installed transformers and this package by\n"
        "`modeling_hmmroformer.experiments.fields.fields_page`.\n\n"
        f"```text\n{fields_reference()}```\n"
    )
