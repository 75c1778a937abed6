"""Registered types, strategies and helpers shared by the codec tests.

The wire names are explicit (``test_codec.*``): other test modules register classes
with the same qualnames, and a wire name belongs to one class.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import struct
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hypothesis import strategies as st

from actorflow.actors import decode, encode, message

# --- registered test types ----------------------------------------------------------


@message(name="test_codec.Item")
@dataclass
class Item:
    sku: str
    qty: int = 1


@message(name="test_codec.Point")
@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int


@message(name="test_codec.Order")
@dataclass
class Order:
    id: int
    items: list[Any]
    by_sku: dict[str, Item] = field(default_factory=dict)
    total: int = field(init=False, default=0)


@message(name="test_codec.Box")
@dataclass
class Box:
    content: Any


@message(name="test_codec.Frozen")
@dataclass(frozen=True)
class Frozen:
    points: tuple[Point, ...]
    seen: int = field(init=False, default=0)


@message(name="test_codec.Color")
class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@message(name="test_codec.Level")
class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@message(name="test_codec.Mode")
class Mode(enum.StrEnum):
    FAST = "fast"
    SLOW = "slow"


@message(name="test_codec.Perm")
class Perm(enum.Flag):
    R = 1
    W = 2
    X = 4


@dataclass
class NotRegistered:
    x: int


class MyStr(str):
    pass


class Pair(NamedTuple):
    a: int
    b: int


class Unregistered(enum.Enum):
    A = 1


# --- helpers -------------------------------------------------------------------------


def assert_same(a: object, b: object) -> None:
    """Assert ``a`` and ``b`` are equal *and* of the same types all the way down."""
    assert type(a) is type(b), f"{type(a).__name__} != {type(b).__name__}: {a!r} vs {b!r}"
    if isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b)  # nan, -0.0: compare bits
    elif isinstance(a, decimal.Decimal):
        assert str(a) == str(b)  # exact representation; also safe for signalling NaN
    elif isinstance(a, dt.datetime | dt.time):
        assert repr(a) == repr(b)  # fields, fold and the tzinfo (name or key) itself
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple)
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert isinstance(b, dict)
        assert len(a) == len(b)
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
            assert_same(ka, kb)
            assert_same(va, vb)
    elif isinstance(a, set | frozenset):
        assert a == b
        assert sorted(map(repr, map(type, a))) == sorted(map(repr, map(type, b)))
    elif isinstance(a, enum.Enum):
        assert a is b
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert hasattr(a, f.name) == hasattr(b, f.name)
            if hasattr(a, f.name):
                assert_same(getattr(a, f.name), getattr(b, f.name))
    else:
        assert a == b


def roundtrip(value: object) -> Any:
    return decode(encode(value))


# --- strategies ----------------------------------------------------------------------

fixed_offsets = st.builds(
    dt.timezone,
    st.timedeltas(min_value=dt.timedelta(hours=-23), max_value=dt.timedelta(hours=23)),
)
named_offsets = st.builds(
    dt.timezone,
    st.timedeltas(min_value=dt.timedelta(hours=-5), max_value=dt.timedelta(0)),
    st.text(min_size=1, max_size=5),
)
tzinfos = st.none() | st.just(dt.UTC) | fixed_offsets | named_offsets | st.timezones()

hashable_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.datetimes(timezones=tzinfos)
    | st.dates()
    | st.times(timezones=st.none() | fixed_offsets)
    | st.timedeltas()
    | st.uuids()
    | st.decimals(allow_nan=False)
    | st.sampled_from([*Color, *Level, *Mode, Perm.R, Perm.R | Perm.X, Perm(0)])
    | st.builds(Point, st.integers(), st.integers())
)
leaves = (
    hashable_leaves | st.floats() | st.decimals() | st.builds(Item, st.text(), st.integers(-5, 5))
)
hashable = st.recursive(
    hashable_leaves,
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(hashable, inner, max_size=4)
        | st.sets(hashable, max_size=4)
        | st.frozensets(hashable, max_size=4)
        | st.builds(Box, inner)
        | st.builds(Order, st.integers(), st.lists(inner, max_size=3))
    ),
    max_leaves=20,
)
