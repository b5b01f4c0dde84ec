"""The settings of a probing run (`probing.run.run_probing`, `scripts/probe.py`), validated.

Each field carries its one line of help: `scripts/probe.py` reads its options from this class
with transformers' `HfArgumentParser` (`--num_probe_tasks 4` or `--num-probe-tasks 4`, lists as
`--distances 1 2 3`). This module imports only the standard library.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal


def _setting(default, help: str):
    """A field with its default (a list copied per instance) and its one line of help."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass
class ProbeConfig:
    """Every setting of a probing run (validated; see docs/probing.md)."""

    num_probe_tasks: int = _setting(16, "tasks probed")
    rows_per_task: int = _setting(64, "rows per task")
    positions_per_row: int | None = _setting(48, "observation positions kept per row (0: every one)")
    distances: list[int] = _setting([1, 2, 3, 4, 5], "previous-token distances")
    layers: list[int] | None = _setting(None, "hidden-state indices, 0 = embeddings (default: all)")
    probe_train_fraction: float = _setting(0.5, "fraction of the probe rows the probes are fit on")
    l2: float = _setting(1e-3, "the probes' weight penalty (l2 / 2 |W|^2)")
    max_iter: int = _setting(100, "L-BFGS iterations of each probe's fit")
    num_resamples: int = _setting(1000, "bootstrap resamples")
    shuffle_rows: int | None = _setting(None, "rows of the shuffle test (default: up to 256)")
    attention_rows: list[int] = _setting([0], "Figure 7's test rows")
    dtype: Literal["float16", "float32"] = _setting("float16", "storage of the captures")
    batch_size: int = _setting(64, "rows a forward pass")
    seed: int = _setting(0, "seed of the probe rows and resamples")
    num_splits: int = _setting(3, "probe splits the claim curves are measured on (seeds seed, seed + 1, ...)")

    def __post_init__(self) -> None:
        self.distances = [int(d) for d in self.distances]
        self.attention_rows = [int(r) for r in self.attention_rows]
        if self.layers is not None:
            self.layers = [int(layer) for layer in self.layers]
        if self.positions_per_row == 0:  # the command line's "every position"
            self.positions_per_row = None
        for name in (
            "num_probe_tasks",
            "rows_per_task",
            "max_iter",
            "num_resamples",
            "batch_size",
            "num_splits",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer.")
        if self.positions_per_row is not None and self.positions_per_row < 1:
            raise ValueError(
                f"positions_per_row={self.positions_per_row} must be positive (0 or None: every position)."
            )
        if not 0 < self.probe_train_fraction < 1:
            raise ValueError(
                f"probe_train_fraction={self.probe_train_fraction} must lie strictly between 0 and 1."
            )
        if self.shuffle_rows is not None and (
            not isinstance(self.shuffle_rows, int) or self.shuffle_rows < 1
        ):
            raise ValueError(
                f"shuffle_rows={self.shuffle_rows!r} must be a positive integer (or None: up to 256)."
            )
        if self.seed < 0:
            raise ValueError(f"seed={self.seed} must be >= 0.")
        if self.l2 < 0:
            raise ValueError(f"l2={self.l2} must be >= 0.")
        if not self.distances:
            raise ValueError("distances is empty: give at least one previous-token distance.")

    @property
    def split_seeds(self) -> tuple[int, ...]:
        """The seeds of the probe splits: `seed` (the split every record is scored on), `seed + 1`, ..."""
        return tuple(self.seed + i for i in range(self.num_splits))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class PatchingConfig:
    """Every setting of a patching run (`probing.patching.run_patching`, `scripts/patching.py`;
    docs/patching.md), validated."""

    num_tasks: int = _setting(16, "tasks whose fresh rows are patched (of the mixture's, drawn by seed)")
    rows_per_task: int = _setting(16, "rows per task: a state donor is another row of the same task")
    batch_size: int = _setting(64, "rows a forward pass")
    seed: int = _setting(0, "seed of the tasks, rows, positions, donors and random donors")

    def __post_init__(self) -> None:
        for name in ("num_tasks", "rows_per_task", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer.")
        if self.num_tasks < 2 or self.rows_per_task < 2:
            raise ValueError(
                f"num_tasks={self.num_tasks} and rows_per_task={self.rows_per_task} must be at least 2: a task "
                "donor is a row of another task, a state donor another row of the same task."
            )
        if self.seed < 0:
            raise ValueError(f"seed={self.seed} must be >= 0.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
