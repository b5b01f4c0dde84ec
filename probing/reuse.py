"""Readings computed once per process: the same inputs give the same records.

The kept networks of a model are each read against the same untrained twin on the same probe
rows, beside the same token-only floor (a study's development probes read four of them after
the model's own probes, in one process), so the twin's probes and the split curves of the twin
and of the floor come out the same every time. `once(name, inputs, compute)` returns what
`compute()` returned before for equal inputs (`digest`: every array's bytes, every other
value's JSON), a copy, and computes it otherwise; the last `KEPT` readings are kept.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

KEPT = 16  # readings held: a probing run makes 10 (3 networks x 3 splits, the twin's probes)
_READINGS: OrderedDict[str, Any] = OrderedDict()


def digest(value) -> str:
    """A hash of `value`: tensors and arrays by shape, dtype and bytes; dataclasses, mappings and
    sequences item by item (a mapping's keys in order); anything else by its JSON."""
    hashed = hashlib.sha1()

    def add(item) -> None:
        if torch.is_tensor(item):
            item = item.detach().cpu().numpy()
        if isinstance(item, np.generic):
            item = item.item()
        if isinstance(item, np.ndarray):
            hashed.update(f"array{item.shape}{item.dtype}".encode())
            hashed.update(np.ascontiguousarray(item).tobytes())
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            hashed.update(type(item).__name__.encode())
            add({field.name: getattr(item, field.name) for field in dataclasses.fields(item)})
        elif isinstance(item, dict):
            hashed.update(b"{")
            for key in sorted(item, key=str):
                add(str(key))
                add(item[key])
            hashed.update(b"}")
        elif isinstance(item, list | tuple):
            hashed.update(b"[")
            for inner in item:
                add(inner)
            hashed.update(b"]")
        else:
            hashed.update(json.dumps(item).encode())

    add(value)
    return hashed.hexdigest()


def once(name: str, inputs, compute: Callable[[], Any]):
    """`compute()`, or a copy of what it returned for the same `name` and equal `inputs`
    earlier in this process."""
    key = f"{name}-{digest(inputs)}"
    if key not in _READINGS:
        _READINGS[key] = compute()
        while len(_READINGS) > KEPT:
            _READINGS.popitem(last=False)
    _READINGS.move_to_end(key)
    return copy.deepcopy(_READINGS[key])


def clear() -> None:
    """Forget every reading (tests)."""
    _READINGS.clear()
