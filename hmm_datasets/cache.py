"""Exact predictions computed once per process: the Bayes-optimal predictor, its oracle and its
memory-L versions on the same rows of the same mixture are the same tensors for every model
a study analyses (Figure 1 and the memory stage read fixed test rows), and they are the
costliest part of each analysis.

    probs = cached("bayes", params, input_ids, lambda: bayes.next_token_probs(input_ids))

A key is a hash of the mixture's parameters and the rows (and tasks or positions where they
matter); the oldest entries are dropped past `MAX_BYTES` held. Processes that work side by side (a
study's `--jobs`) share their predictions through a folder named by the environment variable
`HMM_DATASETS_CACHE`, when it is set: a prediction missing in memory is read from there, and
one computed is written there (whole or not at all), by the first process to ask for it while the
others wait for it under a lock, doing meanwhile what they were given to do (`meanwhile`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from .params import HMMParams

CACHE_ENV = "HMM_DATASETS_CACHE"  # a folder shared by processes side by side (module docstring)
MAX_BYTES = 2**30
_ENTRIES: OrderedDict[tuple, torch.Tensor] = OrderedDict()


def digest(params: HMMParams, *arrays) -> str:
    """A hash of the mixture's parameters and `arrays` (rows, tasks): what a prediction depends on."""
    hashed = hashlib.sha1()
    for array in (params.task_prior, params.initial, params.transitions, params.emissions, *arrays):
        values = array.cpu().numpy() if torch.is_tensor(array) else np.asarray(array)
        hashed.update(str(values.shape).encode())
        hashed.update(np.ascontiguousarray(values).tobytes())
    return hashed.hexdigest()


def cached(
    name: str,
    params: HMMParams,
    input_ids,
    compute: Callable[[], torch.Tensor],
    keys: tuple = (),
    meanwhile: Callable[[], object] | None = None,
):
    """`compute()`, or the tensor it returned before for the same `name`, parameters, rows and
    `keys` (the other arrays it depends on: tasks, positions) in this process, or in any process
    sharing the folder `HMM_DATASETS_CACHE` names. Where another of those processes is computing
    it now, `meanwhile()` runs first (something this one will need next), then this one waits for
    it. The caller must not modify the result in place."""
    key = (name, digest(params, input_ids, *keys))
    if key in _ENTRIES:
        _ENTRIES.move_to_end(key)
        return _ENTRIES[key]
    path = shared_path(key)
    value = compute() if path is None else shared_value(path, compute, meanwhile)
    _ENTRIES[key] = value
    while len(_ENTRIES) > 1 and sum(t.numel() * t.element_size() for t in _ENTRIES.values()) > MAX_BYTES:
        _ENTRIES.popitem(last=False)
    return value


def shared_path(key: tuple[str, str]) -> Path | None:
    """The file of `key` in the folder `HMM_DATASETS_CACHE` names, or None when it is not set."""
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return None
    return Path(folder) / f"{re.sub(r'[^A-Za-z0-9.-]', '_', key[0])}-{key[1]}.safetensors"


def shared_value(
    path: Path, compute: Callable[[], torch.Tensor], meanwhile: Callable[[], object] | None = None
) -> torch.Tensor:
    """The prediction in `path`, or `compute()` written there. Processes asking for the same
    prediction at once wait for the first one to write it instead of computing it again, after
    running `meanwhile()` if they have it."""
    with locked(path, meanwhile):
        if path.is_file():
            return load_file(str(path))["value"]
        value = compute()
        if value.device.type == "cpu":  # a GPU's predictions stay in its process
            write_shared(path, value)
        return value


@contextlib.contextmanager
def locked(path: Path, meanwhile: Callable[[], object] | None = None):
    """Hold the lock of the shared prediction `path` (a hidden file beside it) while inside; where
    another process holds it, run `meanwhile()` (if given) before waiting for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path(path), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process holds it
            if meanwhile is not None:
                meanwhile()
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def lock_path(path: Path) -> Path:
    """The hidden lock file beside the shared prediction `path`."""
    return path.with_name(f".{path.name}.lock")


def write_shared(path: Path, value: torch.Tensor) -> None:
    """`value` into `path`, whole or not at all: written beside it, then renamed."""
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    save_file({"value": value.detach().cpu().contiguous()}, str(staging))
    os.replace(staging, path)


def clear() -> None:
    """Forget every cached prediction."""
    _ENTRIES.clear()
