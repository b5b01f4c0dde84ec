"""The one check of a typed value's JSON object: a key that is no field, or a field without a
default that the object lacks, is refused in one line; a field with a default may be absent,
and a value reads back from its own JSON."""

from dataclasses import dataclass, field

import pytest

from hmm_datasets.json_form import JsonForm, check_fields


@dataclass(kw_only=True)
class Example(JsonForm):
    required: int
    optional: list[int] | None = None
    later: str
    counts: dict = field(default_factory=dict)

    json_name = "an example.json"
    json_fix = ": write it again"


def test_a_value_reads_back_from_its_json_and_leaves_out_what_it_lacks():
    value = Example(required=1, later="x")
    assert value.to_dict() == {"required": 1, "later": "x", "counts": {}}
    assert list(Example(required=1, optional=[2], later="x").to_dict()) == [
        "required",
        "optional",
        "later",
        "counts",
    ]
    assert Example.from_dict(value.to_dict()) == value
    check_fields(Example, {"required": 1, "later": "x"}, "an example.json", "")  # defaults may be absent


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"required": 1, "later": "x", "extra": 0, "another": 0},
            "an example.json has no field 'another' \\(its fields: required, optional, later, counts\\)",
        ),
        ({"later": "x"}, "an example.json lacks 'required': write it again"),
        ({"required": 1}, "an example.json lacks 'later': write it again"),
    ],
)
def test_an_unknown_key_or_a_missing_field_is_refused_in_one_line(data, message):
    with pytest.raises(ValueError, match=message) as error:
        Example.from_dict(data)
    assert "\n" not in str(error.value)
