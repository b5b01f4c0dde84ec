"""The settings of a probing run (`probing.run.run_probing`, `scripts/probe.py`), validated.

This module imports only the standard library: `scripts/probe.py --help` shows these defaults
without importing torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class ProbeConfig:
    """Every setting of a probing run (validated; see docs/probing.md)."""

    num_probe_tasks: int = 16
    rows_per_task: int = 64
    positions_per_row: int | None = 48
    distances: tuple[int, ...] = (1, 2, 3, 4, 5)
    layers: tuple[int, ...] | None = None
    probe_train_fraction: float = 0.5
    l2: float = 1e-3
    max_iter: int = 100
    num_resamples: int = 1000
    shuffle_rows: int | None = None  # None: min(256, the corpus's test rows)
    attention_rows: tuple[int, ...] = (0,)
    dtype: str = "float16"
    batch_size: int = 64
    seed: int = 0
    num_splits: int = 3  # probe splits the claim curves are measured on (seeds seed, seed + 1, ...)

    def __post_init__(self) -> None:
        self.distances = tuple(int(d) for d in self.distances)
        self.attention_rows = tuple(int(r) for r in self.attention_rows)
        if self.layers is not None:
            self.layers = tuple(int(layer) for layer in self.layers)
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
                f"positions_per_row={self.positions_per_row} must be positive (or None for all)."
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
