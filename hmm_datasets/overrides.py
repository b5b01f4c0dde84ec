"""The one override syntax of every script: `--section.field value` (or `--section.field=value`).

    accelerate launch --cpu --num_processes 1 scripts/train.py configs/small.yaml --model.num_hidden_layers 8 --training.learning_rate 1e-3
    python scripts/reproduce.py --preset small --training.max_steps 2800
    python scripts/generate.py --preset small --corpus.num_tasks 64 --out runs/corpus

Run configs have sections (corpus, data, model, training, run) because their fields clash in a
flat namespace: `vocab_size` is V for the corpus and V + 1 for the model, `seed` draws the HMMs
in one and orders the batches in the other. Values are read as YAML 1.2, like the config files.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


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


def parse_overrides(arguments: list[str], sections: tuple[str, ...]) -> dict[str, dict[str, Any]]:
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
        section, field = key.split(".", 1)
        if section not in sections:
            raise ValueError(
                f"override --{key}: unknown section {section!r}; sections are {', '.join(sections)}."
            )
        out.setdefault(section, {})[field] = read_yaml(raw)
    return out
