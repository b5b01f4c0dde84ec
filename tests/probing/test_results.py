"""probe_results.json as one value: every committed file reads and writes back byte for byte, a
run's results survive their JSON, and a file with a field this code does not know, or without
one it needs, is refused in one line."""

import dataclasses
import json
from pathlib import Path

import pytest

from probing.results import ProbeResults

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(
    [*(ROOT / "results").rglob("probe_results.json"), *(ROOT / "benchmarks").rglob("probe_results.json")]
)


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(ROOT)) for p in COMMITTED])
def test_every_committed_probe_results_file_reads_and_writes_back_byte_for_byte(path):
    text = path.read_text()
    results = ProbeResults.from_dict(json.loads(text))
    assert json.dumps(results.to_dict(), indent=1) + "\n" == text
    assert results.depth == json.loads(text)["model"]["num_hidden_layers"]
    assert len(results.record_set()) == len(results.records)


def test_the_fields_are_the_json_keys_in_the_order_a_run_writes_them():
    names = [field.name for field in dataclasses.fields(ProbeResults)]
    newest = json.loads((ROOT / "results" / "small" / "probes" / "probe_results.json").read_text())
    assert [name for name in names if name in newest] == list(newest)  # an older file: a subsequence
    assert len(COMMITTED) >= 3


def test_a_field_this_code_does_not_know_or_lacks_is_refused_in_one_line():
    data = json.loads(COMMITTED[0].read_text())
    with pytest.raises(ValueError, match="has no field 'recrods'") as unknown:
        ProbeResults.from_dict({**data, "recrods": []})
    lacking = {key: value for key, value in data.items() if key != "patterns"}
    with pytest.raises(ValueError, match="lacks 'patterns': write it again with scripts/probe.py") as missing:
        ProbeResults.from_dict(lacking)
    assert "\n" not in str(unknown.value) + str(missing.value)


def test_a_field_an_older_file_lacks_is_left_out_of_its_json():
    results = ProbeResults.from_dict(json.loads(COMMITTED[0].read_text()))
    older = dataclasses.replace(results, splits=None, model_type=None)
    assert "splits" not in older.to_dict() and "model_type" not in older.to_dict()
    assert ProbeResults.from_dict(older.to_dict()) == older
