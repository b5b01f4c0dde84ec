"""Small helpers shared by the command-line scripts."""

from __future__ import annotations

import json
from typing import Any


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`["num_tasks=64", "transition_rank=null"]` -> `{"num_tasks": 64, "transition_rank": None}`.

    Values are read as JSON (numbers, null, true/false, lists); anything else is a string.
    """
    overrides = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"override {item!r} must look like FIELD=VALUE, e.g. num_tasks=64.")
        key, raw = item.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        overrides[key.strip()] = value
    return overrides
