"""The probe record and its indexed set: every committed probe_results.json reads (version 1,
the network in the metric's name, through the upgrade), lookups agree with a scan of the list,
and version 2 writes back unchanged."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from probing.layerwise import record
from probing.records import (
    NETWORKS,
    POSITION_GROUPS,
    RECORDS_VERSION,
    Record,
    RecordSet,
    upgrade_v1,
)
from probing.results import ProbeResults

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "results").rglob("probe_results.json"))
V1_NETWORKS = {"untrained_": "twin", "ceiling_": "ceiling"}


def scan_v1(records: list[dict], target, metric, layer=None, head=None, positions="all", network="trained"):
    """What a lookup must find in a version-1 list, by a plain scan: the twin's metrics, and the
    ceiling belief probe's, carry their network as a prefix."""
    names = {"twin": {f"untrained_{metric}"}, "ceiling": {metric, f"ceiling_{metric}"}}.get(network, {metric})
    return [
        r
        for r in records
        if (r["target"], r["layer"], r["head"], r.get("positions", "all")) == (target, layer, head, positions)
        and r["metric"] in names
    ]


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(ROOT)) for p in COMMITTED])
def test_every_committed_probe_result_reads_through_the_upgrade(path):
    results = json.loads(path.read_text())
    assert "records_version" not in results  # written as version 1
    raw = results["records"]
    records = ProbeResults.from_dict(results).record_set()
    assert len(records) == len(raw) > 100
    assert len({r.key for r in records}) == len(records)  # no two records share a key once upgraded
    for read, old in zip(records, raw, strict=True):
        prefixed = [p for p in V1_NETWORKS if old["metric"].startswith(p)]
        assert read.network == V1_NETWORKS[prefixed[0]] if prefixed else read.network != "twin"
        assert read.metric == old["metric"].removeprefix(prefixed[0] if prefixed else "")
        assert (read.target, read.layer, read.head, read.value) == (
            old["target"],
            old["layer"],
            old["head"],
            old["value"],
        )
        assert read.positions == old.get("positions", "all")  # older records lack positions
    assert {r.positions for r in records} <= set(POSITION_GROUPS)
    assert sum(r.network == "twin" for r in records) == sum(r["metric"].startswith("untrained_") for r in raw)
    for r in list(records)[:: max(1, len(records) // 200)]:  # lookups agree with a scan, every kind
        (expected,) = scan_v1(raw, r.target, r.metric, r.layer, r.head, r.positions, r.network)
        assert records.find(*r.key).value == expected["value"]
    per_layer = [r for r in scan_v1(raw, "task", "accuracy", 0) if r["head"] is None]
    assert records.curve("task")["value"][0] == per_layer[0]["value"]
    # written as version 2, read back: the same records, the same keys in the same order
    written = {"records_version": RECORDS_VERSION, "records": records.to_json()}
    again = RecordSet(json.loads(json.dumps(written))["records"])
    assert [r.to_json() for r in again] == written["records"]
    assert all(list(r) == list(Record.__dataclass_fields__) for r in written["records"])


def test_version_1_names_its_networks_in_the_metric():
    def upgraded(metric):
        new = upgrade_v1({"target": "task", "layer": 1, "head": None, "metric": metric, "value": 0.5})
        return new["metric"], new["network"], new["positions"]

    assert upgraded("accuracy") == ("accuracy", "trained", "all")
    assert upgraded("untrained_accuracy") == ("accuracy", "twin", "all")
    assert upgraded("untrained_r2") == ("r2", "twin", "all")
    assert upgraded("ceiling_log_r2") == ("log_r2", "ceiling", "all")
    assert [upgraded(m)[1] for m in ("token_baseline", "chance", "control_chance")] == ["floor"] * 3
    assert [upgraded(m)[1] for m in ("oracle_accuracy", "bayes_optimal_accuracy")] == ["ceiling"] * 2
    assert set(NETWORKS) == {"trained", "twin", "floor", "ceiling"}


def test_a_network_positions_or_version_this_code_does_not_know_is_refused_in_one_line():
    with pytest.raises(ValueError, match="network='untrained' must be one of"):
        Record("task", 1, None, "accuracy", "all", "untrained", 0.5)
    with pytest.raises(ValueError, match="positions='demo3' must be one of"):
        Record("task", 1, None, "accuracy", "demo3", "trained", 0.5)
    with pytest.raises(ValueError, match="version 3; .* upgrade it") as error:
        dataclasses.replace(ProbeResults.read(COMMITTED[0]), records_version=3).record_set()
    assert "\n" not in str(error.value)


def test_a_curve_is_one_targets_per_layer_records_of_one_network_in_layer_order():
    raw = [
        record("task", 2, "accuracy", 0.9, np.array([0.8, 1.0])),
        record("task", 0, "accuracy", 0.5),
        record("task", 1, "accuracy", None),
        record("task", 1, "accuracy", 0.7, positions="test"),
        record("task", 1, "accuracy", 0.6, network="twin"),
        record("task", None, "chance", 0.25, network="floor"),
        record("shuffle", 1, "relative_logit_change", 0.3, head=0),
    ]
    records = RecordSet(raw)
    curve = records.curve("task")
    assert curve["layer"].tolist() == [0, 1, 2]
    assert curve["value"][0] == 0.5 and np.isnan(curve["value"][1]) and curve["value"][2] == 0.9
    assert curve["ci_low"][2] <= 0.9 <= curve["ci_high"][2]
    assert records.curve("task", positions="test")["value"].tolist() == [0.7]
    assert records.curve("task", network="twin")["value"].tolist() == [0.6]
    assert records.curve("shuffle", "relative_logit_change")["layer"].size == 0  # per head only
    assert records.find("shuffle", "relative_logit_change", 1, head=0).value == 0.3
    assert records.find("task", "chance", network="floor").value == 0.25
    assert (
        records.find("task", "chance") is None and records.find("task", "chance", 0, network="floor") is None
    )
    assert records.find("task", "accuracy", 1, network="twin").value == 0.6
