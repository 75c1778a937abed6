"""Message values as JSON and back (actorflow.actors.codec._json)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import pytest

import actorflow as af
from actorflow.actors import from_json, to_json
from actorflow.errors import DecodeError


@af.message
class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@af.message
@dataclass
class Note:
    text: str
    tags: list[str] = field(default_factory=list)


@af.message
@dataclass
class Verdict:
    approved: bool
    note: Note | None = None
    colour: Colour = Colour.RED
    score: float = 0.0
    raw: bytes = b""


def test_registered_values_round_trip_through_json() -> None:
    """A value with nested registered types comes back equal from its JSON shape."""
    value = Verdict(True, Note("ok", ["a"]), Colour.BLUE, 2.5, b"\x00\xff")
    data = to_json(value)
    assert data["$type"] == "Verdict"
    assert data["raw"] == {"$bytes": "AP8="}
    assert from_json(data) == value
    assert from_json(data, "Verdict") == value


def test_a_plain_object_becomes_the_expected_type() -> None:
    """A client writes the fields only; the expected type's annotations do the rest."""
    got = from_json(
        {"approved": False, "note": {"text": "no", "tags": ["x"]}, "colour": "blue", "score": 1},
        "Verdict",
    )
    assert got == Verdict(False, Note("no", ["x"]), Colour.BLUE, 1.0)
    assert isinstance(got.score, float)
    assert from_json(3, "int") == 3
    assert from_json([1, 2], "object") == [1, 2]


@pytest.mark.parametrize(
    ("data", "label", "message"),
    [
        ({"approved": "yes"}, "Verdict", "value.approved: expected bool"),
        ({}, "Verdict", r"needs the field\(s\) approved"),
        ({"approved": True, "bogus": 1}, "Verdict", "has no field bogus"),
        ("three", "int", "expected int, got a string"),
        (True, "int", "expected int, got a boolean"),
        ({"$type": "no.such.Type"}, "object", "not registered"),
    ],
)
def test_json_of_the_wrong_shape_is_refused_by_name(data: object, label: str, message: str) -> None:
    """What cannot be the expected type is a DecodeError saying which field and why."""
    with pytest.raises(DecodeError, match=message):
        from_json(data, label)
