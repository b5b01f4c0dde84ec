"""The probe record: one measured number of a probed network, and an indexed set of them.

`probe_results.json` keeps its records as a list of JSON objects, `Record.to_json()`:
`{"target", "layer", "head", "metric", "positions", "value", "ci_low", "ci_high"}`, with
`layer` the hidden-state index (0 = embeddings, i = output of layer i) or None for a layer-free
reference, `head` set only for per-head results (the shuffle test), and `positions` the position
group it is scored on (`POSITION_GROUPS`). Results written before position groups have no
`positions`: they read as "all".

Which network a record measures is part of its metric's name (`network`): the trained model,
its untrained twin (`TWIN_PREFIX`: `untrained_accuracy`, ...) or a floor or ceiling that no
network is needed for (`REFERENCE_METRICS`: the token-only baseline, chance, the exact
predictors; `CEILING_PREFIX`: a belief probe fed the exact beliefs). A `RecordSet` reads such
a list once and finds a record, or one target's per-layer curve, by its key instead of
scanning the list.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

# where probes are scored: every observation position, the first / second / later
# demonstrations, every demonstration, the test sequence
POSITION_GROUPS = ("all", "demo1", "demo2", "later", "demos", "test")
DECIDING_POSITIONS = "demo1"  # where Figure 3(a)'s claims are decided: the task is still uncertain there
TWIN_PREFIX = "untrained_"  # a metric of the untrained twin: `untrained_accuracy`, `untrained_r2`, ...
CEILING_PREFIX = "ceiling_"  # a belief probe's metric with the exact log beliefs as features
REFERENCE_METRICS = ("token_baseline", "chance", "oracle_accuracy", "bayes_optimal_accuracy")
Network = Literal["trained", "twin", "reference"]


def twin_metric(metric: str) -> str:
    """The name of `metric` measured on the untrained twin."""
    return TWIN_PREFIX + metric


@dataclass(frozen=True)
class Record:
    """One measured number: `value` of `metric` for `target` at `layer` (None: layer-free),
    `head` (None: not per head), on the positions `positions`, with its 95% bootstrap
    interval (None where there is none)."""

    target: str
    layer: int | None
    head: int | None
    metric: str
    positions: str
    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None

    @property
    def network(self) -> Network:
        if self.metric.startswith(TWIN_PREFIX):
            return "twin"
        reference = self.metric in REFERENCE_METRICS or self.metric.startswith(CEILING_PREFIX)
        return "reference" if reference else "trained"

    @property
    def key(self) -> tuple:
        return (self.target, self.metric, self.layer, self.head, self.positions)

    @classmethod
    def from_json(cls, data: dict) -> Record:
        return cls(**{"positions": "all", **data})

    def to_json(self) -> dict:
        return asdict(self)


class RecordSet:
    """Records, indexed by (target, metric, layer, head, positions)."""

    def __init__(self, records: Iterable[Record | dict]) -> None:
        self.records = [r if isinstance(r, Record) else Record.from_json(r) for r in records]
        self._index = {record.key: record for record in self.records}
        self._layers: dict[tuple, list[Record]] = {}  # (target, metric, positions) -> per-layer records
        for record in sorted(self.records, key=lambda r: -1 if r.layer is None else r.layer):
            if record.layer is not None and record.head is None:
                self._layers.setdefault((record.target, record.metric, record.positions), []).append(record)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def find(self, target: str, metric: str, layer=None, head=None, positions: str = "all") -> Record | None:
        """The record of (target, metric, layer, head, positions), None if there is none."""
        return self._index.get((target, metric, layer, head, positions))

    def by_layer(self, target: str, metric: str = "accuracy", positions: str = "all") -> list[Record]:
        """One target's per-layer records of `metric` (no head), in layer order."""
        return list(self._layers.get((target, metric, positions), []))

    def curve(self, target: str, metric: str = "accuracy", positions: str = "all") -> dict[str, np.ndarray]:
        """`layer`, `value`, `ci_low`, `ci_high` arrays of one target's per-layer metric (NaN
        where a value is None)."""
        rows = self.by_layer(target, metric, positions)
        return {
            key: np.array([np.nan if getattr(r, key) is None else getattr(r, key) for r in rows], dtype=float)
            for key in ("layer", "value", "ci_low", "ci_high")
        }

    def to_json(self) -> list[dict]:
        return [record.to_json() for record in self.records]
