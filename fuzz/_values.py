"""Valid values of every type the wire format carries, to be encoded and then mutated."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import random
import uuid
import zoneinfo
from typing import Any

import actorflow as af

__all__ = ["Colour", "Point", "Reading", "Shade", "random_value"]


@af.message(name="fuzz.Point")
@dataclasses.dataclass(frozen=True)
class Point:
    """A frozen (hashable) registered dataclass: can be a set item or map key."""

    x: int
    y: int


@af.message(name="fuzz.Reading")
@dataclasses.dataclass
class Reading:
    """A mutable registered dataclass with a default and an init=False field."""

    sensor: str
    values: list[float]
    note: str | None = None
    seen: int = dataclasses.field(default=0, init=False)


@af.message(name="fuzz.Colour")
class Colour(enum.Enum):
    RED = 1
    GREEN = 2


@af.message(name="fuzz.Shade")
class Shade(enum.Flag):
    LIGHT = 1
    DARK = 2


_P = (1 << 61) - 1
_ZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo"]
_INTS = [0, 1, -1, -2, 127, 128, 255, 256, 1 << 31, (1 << 63) - 1, -(1 << 63), (1 << 64) - 1, _P]


def _leaf(rng: random.Random) -> Any:
    choice = rng.randrange(17)
    if choice == 0:
        return None
    if choice == 1:
        return rng.random() < 0.5
    if choice == 2:
        return rng.choice(_INTS) + rng.randrange(-2, 3)
    if choice == 3:
        return rng.choice([0.0, -0.0, 1.5, float("inf"), float("-inf"), 1e308, rng.random()])
    if choice == 4:
        return "".join(rng.choice("ab\u00e9\u4e2d\U0001f600") for _ in range(rng.randrange(6)))
    if choice == 5:
        return rng.randbytes(rng.randrange(8))
    if choice == 6:
        return rng.choice([1 << 64, -(1 << 63) - 1, _P * (1 << 70), -(1 << 200)])
    if choice == 7:
        zone: dt.tzinfo | None = rng.choice([None, dt.UTC, dt.timezone(dt.timedelta(hours=-3))])
        if rng.random() < 0.4:
            zone = zoneinfo.ZoneInfo(rng.choice(_ZONES))
        return dt.datetime(2024, 1 + rng.randrange(12), 1 + rng.randrange(28), tzinfo=zone)
    if choice == 8:
        return dt.date(1 + rng.randrange(9999), 1 + rng.randrange(12), 1 + rng.randrange(28))
    if choice == 9:
        return dt.time(rng.randrange(24), rng.randrange(60), tzinfo=dt.UTC)
    if choice == 10:
        return dt.timedelta(days=rng.randrange(-9, 9), microseconds=rng.randrange(10**6))
    if choice == 11:
        return uuid.UUID(int=rng.getrandbits(128))
    if choice == 12:
        return decimal.Decimal(rng.choice(["1.5", "-0", "NaN", "Infinity", "1E+999", "sNaN"]))
    if choice == 13:
        return rng.choice(list(Colour))
    if choice == 14:
        return rng.choice([Shade.LIGHT, Shade.DARK, Shade.LIGHT | Shade.DARK, Shade(0)])
    if choice == 15:
        return Point(rng.randrange(-5, 5), rng.randrange(1 << 70))
    reading = Reading("s", [rng.random()], rng.choice([None, "n"]))
    reading.seen = rng.randrange(3)
    return reading


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """A random value made of every supported type, nested a few levels."""
    if depth > 3 or rng.random() < 0.35:
        return _leaf(rng)
    n = rng.randrange(5)
    kind = rng.randrange(5)
    if kind == 0:
        return [random_value(rng, depth + 1) for _ in range(n)]
    if kind == 1:
        return tuple(random_value(rng, depth + 1) for _ in range(n))
    hashable = [_leaf(rng) for _ in range(n)]
    hashable = [
        h
        for h in hashable
        if not isinstance(h, Reading | decimal.Decimal)
        or (isinstance(h, decimal.Decimal) and not h.is_snan())
    ]
    if kind == 2:
        return set(hashable) if rng.random() < 0.5 else frozenset(hashable)
    if kind == 3:
        return {h: random_value(rng, depth + 1) for h in hashable}
    return {f"k{i}": random_value(rng, depth + 1) for i in range(n)}
