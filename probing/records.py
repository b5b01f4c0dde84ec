"""The probe record: one measured number of a probed network, and an indexed set of them.

`probe_results.json` keeps its records as a list of JSON objects, `Record.to_json()`:
`{"target", "layer", "head", "metric", "positions", "network", "value", "ci_low", "ci_high"}`,
with `layer` the hidden-state index (0 = embeddings, i = output of layer i) or None for a
layer-free reference, `head` set only for per-head results (the shuffle test), `positions` the
position group it is scored on (`POSITION_GROUPS`) and `network` what was measured
(`NETWORKS`): the trained model, its untrained twin, a floor that needs no network (the
token-only baseline, chance) or a ceiling (the exact predictors, a belief probe fed the exact
beliefs). The file says which version of this form it holds (`records_version`); version 1
(files written before the key: no `network`, the twin's and the ceiling's metrics named
`untrained_<metric>` and `ceiling_<metric>`, and before position groups no `positions`) reads
through `probing.results.ProbeResults.record_set`. A `RecordSet` reads such a list once and
finds a record, or one target's per-layer curve, by its key instead of scanning the list.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Literal, get_args

import numpy as np

# where probes are scored: every observation position, the first / second / later
# demonstrations, every demonstration, the test sequence
Positions = Literal["all", "demo1", "demo2", "later", "demos", "test"]
POSITION_GROUPS: tuple[str, ...] = get_args(Positions)
# where Figure 3(a)'s claims are decided: the task is still uncertain there
DECIDING_POSITIONS: Positions = "demo1"
Network = Literal["trained", "twin", "floor", "ceiling"]
NETWORKS: tuple[str, ...] = get_args(Network)
RECORDS_VERSION = 2  # of the records' JSON form (`records_version` in probe_results.json)

# version 1 named the network in the metric: a prefix, or a metric that only a floor or a ceiling has
_V1_PREFIXES = {"untrained_": "twin", "ceiling_": "ceiling"}
_V1_REFERENCES = {
    **dict.fromkeys(("token_baseline", "chance", "control_chance"), "floor"),
    **dict.fromkeys(("oracle_accuracy", "bayes_optimal_accuracy"), "ceiling"),
}


@dataclass(frozen=True)
class Record:
    """One measured number: `value` of `metric` for `target` at `layer` (None: layer-free),
    `head` (None: not per head), on the positions `positions`, of `network`, with its 95%
    bootstrap interval (None where there is none)."""

    target: str
    layer: int | None
    head: int | None
    metric: str
    positions: Positions
    network: Network
    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None

    def __post_init__(self) -> None:
        if self.network not in NETWORKS:
            raise ValueError(f"network={self.network!r} must be one of {NETWORKS}.")
        if self.positions not in POSITION_GROUPS:
            raise ValueError(f"positions={self.positions!r} must be one of {POSITION_GROUPS}.")

    @property
    def key(self) -> tuple:
        return (self.target, self.metric, self.layer, self.head, self.positions, self.network)

    @classmethod
    def from_json(cls, data: dict) -> Record:
        return cls(**data)

    def to_json(self) -> dict:
        return asdict(self)


def upgrade_v1(data: dict) -> dict:
    """A version-1 record as version 2: the network out of the metric's name, `positions` "all"
    where the record predates position groups."""
    metric, network = data["metric"], _V1_REFERENCES.get(data["metric"], "trained")
    for prefix, prefixed_network in _V1_PREFIXES.items():
        if metric.startswith(prefix):
            metric, network = metric[len(prefix) :], prefixed_network
    fields = {"positions": "all", **data, "metric": metric, "network": network}
    return {name: fields[name] for name in Record.__dataclass_fields__ if name in fields}


class RecordSet:
    """Records, indexed by (target, metric, layer, head, positions, network)."""

    def __init__(self, records: Iterable[Record | dict]) -> None:
        self.records = [r if isinstance(r, Record) else Record.from_json(r) for r in records]
        self._index = {record.key: record for record in self.records}
        self._layers: dict[tuple, list[Record]] = {}  # (target, metric, positions, network) -> per layer
        for record in sorted(self.records, key=lambda r: -1 if r.layer is None else r.layer):
            if record.layer is not None and record.head is None:
                key = (record.target, record.metric, record.positions, record.network)
                self._layers.setdefault(key, []).append(record)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def find(
        self,
        target: str,
        metric: str,
        layer=None,
        head=None,
        positions: str = "all",
        network: Network = "trained",
    ) -> Record | None:
        """The record of (target, metric, layer, head, positions, network), None if there is none."""
        return self._index.get((target, metric, layer, head, positions, network))

    def by_layer(
        self, target: str, metric: str = "accuracy", positions: str = "all", network: Network = "trained"
    ) -> list[Record]:
        """One target's per-layer records of `metric` (no head) of `network`, in layer order."""
        return list(self._layers.get((target, metric, positions, network), []))

    def curve(
        self, target: str, metric: str = "accuracy", positions: str = "all", network: Network = "trained"
    ) -> dict[str, np.ndarray]:
        """`layer`, `value`, `ci_low`, `ci_high` arrays of one target's per-layer metric of
        `network` (NaN where a value is None)."""
        rows = self.by_layer(target, metric, positions, network)
        return {
            key: np.array([np.nan if getattr(r, key) is None else getattr(r, key) for r in rows], dtype=float)
            for key in ("layer", "value", "ci_low", "ci_high")
        }

    def to_json(self) -> list[dict]:
        return [record.to_json() for record in self.records]
