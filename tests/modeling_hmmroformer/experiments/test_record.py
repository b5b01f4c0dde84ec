"""A model's record and its JSON form: the committed records read and write back byte for byte,
and a record this code cannot read is one clear error."""

import json
from pathlib import Path

import pytest

from modeling_hmmroformer.experiments.analyses.record import READABLE_VERSIONS, RECORD_VERSION, ModelRecord

RESULTS = Path(__file__).resolve().parents[3] / "results"
COMMITTED = sorted(RESULTS.glob("*/**/models/*.json"))


def committed_of_version(version: int) -> list[Path]:
    return [path for path in COMMITTED if json.loads(path.read_text())["version"] == version]


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_committed_records_read_and_write_back_unchanged(version):
    paths = committed_of_version(version)
    assert paths, f"no committed record of version {version}"
    for path in paths:
        data = json.loads(path.read_text())
        record = ModelRecord.from_dict(data)
        assert (record.version, record.depth, record.seed) == (version, data["depth"], data["seed"])
        written = record.to_dict()
        if version == RECORD_VERSION:  # every field kept, in the file's order
            assert json.dumps(written) == json.dumps(data), path
        else:  # an older record gains the later fields empty, and keeps every value it had
            assert {key: written[key] for key in data} == data, path


def test_the_splits_are_the_first_profiles_then_the_others():
    data = json.loads(committed_of_version(RECORD_VERSION)[0].read_text())
    record = ModelRecord.from_dict(data)
    assert record.splits == [data["profiles"], *data["other_splits"]] and len(record.splits) > 1
    older = ModelRecord.from_dict(json.loads(committed_of_version(2)[0].read_text()))
    assert older.splits == [older.profiles]  # version 2 kept one split's profiles


def test_a_record_it_cannot_read_is_one_error_naming_what_is_wrong():
    data = json.loads(committed_of_version(RECORD_VERSION)[0].read_text())
    with pytest.raises(ValueError, match="has version 1; records of versions 2 to 3 are read: delete it"):
        ModelRecord.from_dict({**data, "version": 1})
    with pytest.raises(ValueError, match="has no field 'effects'"):
        ModelRecord.from_dict({**data, "effects": {}})
    with pytest.raises(
        ValueError, match=f"the record of depth {data['depth']} seed {data['seed']} lacks 'statistics'"
    ):
        ModelRecord.from_dict({key: value for key, value in data.items() if key != "statistics"})
