"""The JSON form of this project's typed values (a Figure 1, a probing run's results, a model's
record): a dataclass whose fields are the JSON object's keys, in order. One check reads such an
object back: a key that is no field, or a field without a default that the object lacks, is
refused in one line. Imports nothing but the standard library: every floor of the stack reads
its values through it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, TypeVar

Value = TypeVar("Value", bound="JsonForm")


def check_fields(cls, data: dict, name: str, fix: str) -> None:
    """`ValueError` in one line where `data`, the JSON object of a `cls`, has a key that is none of
    its fields, or lacks a field without a default: "`name` has no field 'x' (its fields: ...)",
    "`name` lacks 'x'`fix`" (`fix`: what to do, e.g. ": write it again with scripts/probe.py")."""
    names = [field.name for field in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ValueError(f"{name} has no field {unknown[0]!r} (its fields: {', '.join(names)})")
    missing = [
        field.name
        for field in dataclasses.fields(cls)
        if field.name not in data
        and field.default is dataclasses.MISSING
        and field.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{name} lacks {missing[0]!r}{fix}")


class JsonForm:
    """A dataclass whose JSON object is its fields, in order, a field that is None left out (a
    file written before the field existed lacks it): `to_dict()` gives the object, and
    `from_dict` reads one back, refused in one line (`check_fields`) naming the file
    (`json_name`, e.g. "a figure1.json") and what to do (`json_fix`)."""

    json_name: ClassVar[str]
    json_fix: ClassVar[str]

    def to_dict(self) -> dict:
        """The JSON object (fields in order; a field that is None left out)."""
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls: type[Value], data: dict) -> Value:
        """The value of its JSON object; `ValueError` naming a field it does not know or lacks."""
        check_fields(cls, data, cls.json_name, cls.json_fix)
        return cls(**data)
