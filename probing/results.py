"""What a probing run measured, `probe_results.json`, as one value: `ProbeResults`.

    results = ProbeResults.read("runs/reproduce-small/model/probes/probe_results.json")
    results.record_set().curve("task")       # every record, indexed (`probing.records`)
    results.patterns["figure3b"]             # the paper's patterns, as `run_probing` measured them

Its fields and their JSON form are here, once; `run_probing` makes one, and every reader (the
summary, the figures, the claims) takes one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from hmm_datasets.json_form import JsonForm

from .records import RECORDS_VERSION, RecordSet, upgrade_v1


@dataclass(kw_only=True)
class ProbeResults(JsonForm):
    """One probing run of one network on one corpus; its JSON object keeps the fields in this
    order.

    `corpus`: where the rows came from; `layout`: their `num_demos`, `demo_length` and
    `test_length`; `model`: the network's `num_hidden_layers`, `num_attention_heads` and
    `hidden_size`; `settings`: the `ProbeConfig`. `layers`: the hidden states probed (0 =
    embeddings) and `relative_depth` their l / L. `probe_tasks`, `num_probe_rows` and
    `probe_rows`: the tasks and rows (probe-train, probe-test) the probes read;
    `num_shuffle_rows`: the test rows of the shuffle test. `skipped`: analysis -> why it cannot
    run on this network. `records`: every measured number (`probing.records.Record`'s JSON form,
    of version `records_version`). `splits`: the curves the claims read, on each seeded split
    of the probe rows. `patterns`: the paper's Figures 2, 3(a) and 3(b) as numbers.
    `timings_s`: seconds per part of the run.

    Results written before some fields existed (the committed `results/paper` and
    `results/small`: no `model_type`, `skipped`, `records_version`, and before the claims' splits
    no `relative_depth`, `probe_rows`, `splits`) have them None, and their JSON leaves them out;
    their records are version 1."""

    corpus: str
    layout: dict[str, int]
    model: dict[str, int]
    device: str
    settings: dict
    layers: list[int]
    relative_depth: list[float] | None = None
    probe_tasks: list[int]
    num_probe_rows: dict[str, int]
    probe_rows: dict[str, list[int]] | None = None
    num_shuffle_rows: int
    model_type: str | None = None
    skipped: dict[str, str] | None = None
    records_version: int | None = None
    records: list[dict]
    splits: dict | None = None
    patterns: dict
    timings_s: dict[str, float]

    json_name = "a probe_results.json"
    json_fix = ": write it again with scripts/probe.py"

    @property
    def depth(self) -> int:
        """The probed network's number of layers."""
        return self.model["num_hidden_layers"]

    def record_set(self) -> RecordSet:
        """The records, indexed, whichever version wrote them; `ValueError` for a version this
        code does not read."""
        version = self.records_version or 1
        if version not in (1, RECORDS_VERSION):
            raise ValueError(
                f"these probe results hold records of version {version}; this hmm-roformer reads versions 1 "
                f"to {RECORDS_VERSION}: upgrade it (pip install -U hmm-roformer)."
            )
        return RecordSet(
            self.records if version == RECORDS_VERSION else [upgrade_v1(r) for r in self.records]
        )

    @classmethod
    def read(cls, path: str | os.PathLike) -> ProbeResults:
        """The results of a `probe_results.json` file."""
        return cls.from_dict(json.loads(Path(path).read_text()))
