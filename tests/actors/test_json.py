"""Message values as JSON and back (actorflow.actors.codec._json)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import pytest

import actorflow as af
from actorflow.actors import from_json, to_json
from actorflow.errors import DecodeError


@af.message
class JsonColour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@af.message
@dataclass
class JsonNote:
    text: str
    tags: list[str] = field(default_factory=list)


@af.message
@dataclass
class JsonVerdict:
    approved: bool
    note: JsonNote | None = None
    colour: JsonColour = JsonColour.RED
    score: float = 0.0
    raw: bytes = b""


def test_registered_values_round_trip_through_json() -> None:
    """A value with nested registered types comes back equal from its JSON shape."""
    value = JsonVerdict(True, JsonNote("ok", ["a"]), JsonColour.BLUE, 2.5, b"\x00\xff")
    data = to_json(value)
    assert data["$type"] == "JsonVerdict"
    assert data["raw"] == {"$bytes": "AP8="}
    assert from_json(data) == value
    assert from_json(data, "JsonVerdict") == value


def test_a_plain_object_becomes_the_expected_type() -> None:
    """A client writes the fields only; the expected type's annotations do the rest."""
    got = from_json(
        {"approved": False, "note": {"text": "no", "tags": ["x"]}, "colour": "blue", "score": 1},
        "JsonVerdict",
    )
    assert got == JsonVerdict(False, JsonNote("no", ["x"]), JsonColour.BLUE, 1.0)
    assert isinstance(got.score, float)
    assert from_json(3, "int") == 3
    assert from_json([1, 2], "object") == [1, 2]


@pytest.mark.parametrize(
    ("data", "label", "message"),
    [
        ({"approved": "yes"}, "JsonVerdict", "value.approved: expected bool"),
        ({}, "JsonVerdict", r"needs the field\(s\) approved"),
        ({"approved": True, "bogus": 1}, "JsonVerdict", "has no field bogus"),
        ("three", "int", "expected int, got a string"),
        (True, "int", "expected int, got a boolean"),
        ({"$type": "no.such.Type"}, "object", "not registered"),
    ],
)
def test_json_of_the_wrong_shape_is_refused_by_name(data: object, label: str, message: str) -> None:
    """What cannot be the expected type is a DecodeError saying which field and why."""
    with pytest.raises(DecodeError, match=message):
        from_json(data, label)
