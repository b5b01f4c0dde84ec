"""The probe record and its indexed set: every committed probe_results.json reads, lookups agree
with a scan of the list, and the JSON form is unchanged."""

import json
from pathlib import Path

import numpy as np
import pytest

from probing.layerwise import record
from probing.records import POSITION_GROUPS, Record, RecordSet, twin_metric

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "results").rglob("probe_results.json"))


def scan(records: list[dict], target, metric, layer=None, head=None, positions="all"):
    """What a lookup must find: the matching records of the list, by a plain scan."""
    key = (target, metric, layer, head, positions)
    return [
        r
        for r in records
        if (r["target"], r["metric"], r["layer"], r["head"], r.get("positions", "all")) == key
    ]


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(ROOT)) for p in COMMITTED])
def test_every_committed_probe_result_reads_and_writes_back_unchanged(path):
    raw = json.loads(path.read_text())["records"]
    records = RecordSet(raw)
    assert len(records) == len(raw) > 100
    for written, read in zip(records.to_json(), raw, strict=True):  # older records lack positions
        assert written == {"positions": "all", **read}
        assert "positions" not in read or list(written) == list(read)  # the same keys in the same order
    assert {r.positions for r in records} <= set(POSITION_GROUPS)
    for r in raw[:: max(1, len(raw) // 200)]:  # lookups agree with a scan, every kind of record
        key = (r["target"], r["metric"], r["layer"], r["head"], r.get("positions", "all"))
        (expected,) = scan(raw, *key)
        assert records.find(*key).to_json() == {"positions": "all", **expected}
    per_layer = [r for r in scan(raw, "task", "accuracy", 0) if r["head"] is None]
    assert records.curve("task")["value"][0] == per_layer[0]["value"]


def test_a_curve_is_one_targets_per_layer_records_in_layer_order():
    raw = [
        record("task", 2, "accuracy", 0.9, np.array([0.8, 1.0])),
        record("task", 0, "accuracy", 0.5),
        record("task", 1, "accuracy", None),
        record("task", 1, "accuracy", 0.7, positions="test"),
        record("task", None, "chance", 0.25),
        record("shuffle", 1, "relative_logit_change", 0.3, head=0),
    ]
    records = RecordSet(raw)
    curve = records.curve("task")
    assert curve["layer"].tolist() == [0, 1, 2]
    assert curve["value"][0] == 0.5 and np.isnan(curve["value"][1]) and curve["value"][2] == 0.9
    assert curve["ci_low"][2] <= 0.9 <= curve["ci_high"][2]
    assert records.curve("task", positions="test")["value"].tolist() == [0.7]
    assert records.curve("shuffle", "relative_logit_change")["layer"].size == 0  # per head only
    assert records.find("shuffle", "relative_logit_change", 1, head=0).value == 0.3
    assert records.find("task", "chance").value == 0.25 and records.find("task", "chance", 0) is None


def test_each_record_says_which_network_it_measures():
    def network(metric):
        return Record("task", 1, None, metric, "all", 0.5).network

    assert network("accuracy") == "trained"
    assert network(twin_metric("accuracy")) == "twin"
    assert [network(m) for m in ("token_baseline", "chance", "bayes_optimal_accuracy", "ceiling_r2")] == [
        "reference"
    ] * 4
