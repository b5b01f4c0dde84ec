"""The one way this project writes a file or a folder: whole or not at all.

    write_json(path, data)                       # a file appears complete, or not at all
    build_folder(folder, lambda staging: ...)    # so does a folder

Imports nothing but the standard library: every floor of the stack writes through it.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path


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


def _replace_folder(staging: Path, folder: Path) -> None:
    """Move `staging` to `folder`; an old `folder` is removed only after the move succeeded."""
    old = None
    if folder.exists():
        old = folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
        folder.rename(old)
    staging.rename(folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """A text file, whole or not at all (`write_atomically`)."""
    return write_atomically(path, lambda staging: staging.write_text(text))


def write_json(path: str | os.PathLike, data) -> Path:
    """Plain data as an indented JSON file (one value per line, as every run file is), whole or not at all."""
    return write_text(path, json.dumps(data, indent=1) + "\n")
