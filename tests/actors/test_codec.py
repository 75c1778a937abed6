"""The wire codec: exact round trips of every supported type, and the registry."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import math
import threading
import uuid
import zoneinfo
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings

import actorflow.actors
from actorflow.actors import decode, encode, is_registered, message, wire_name
from actorflow.actors.codec._encode import EXT_DATACLASS, EXT_ENUM
from actorflow.errors import DecodeError, RegistrationError
from tests.support.codec_samples import (
    Box,
    Color,
    Frozen,
    Item,
    Level,
    Mode,
    NotRegistered,
    Order,
    Perm,
    Point,
    assert_same,
    roundtrip,
    values,
)

# --- round trips ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(values)
def test_roundtrip_property(value: object) -> None:
    """Any nesting of the supported types decodes to an equal value of the same types."""
    assert_same(value, roundtrip(value))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        "",
        "héllo ✓",
        b"",
        b"\x00\xff",
        [],
        {},
        (),
        set(),
        frozenset(),
        dt.date(1, 1, 1),
        dt.timedelta(days=-3, microseconds=7),
        uuid.UUID(int=0),
        decimal.Decimal("-0"),
        decimal.Decimal("1.500"),
    ],
    ids=repr,
)
def test_roundtrip_each_builtin(value: object) -> None:
    """Every plain and stdlib value type decodes to itself, type included."""
    assert_same(value, roundtrip(value))


@pytest.mark.parametrize("n", [2**64, -(2**63) - 1, 3**200, -(7**300)])
def test_big_ints_roundtrip(n: int) -> None:
    """Integers beyond msgpack's 64-bit range round-trip exactly."""
    assert_same(n, roundtrip(n))


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308])
def test_special_floats_keep_their_bits(x: float) -> None:
    """nan, infinities, -0.0 and the extremes survive bit for bit."""
    assert_same(x, roundtrip(x))


@pytest.mark.parametrize("text", ["NaN", "-NaN", "sNaN", "Infinity", "-Infinity", "1E+5", "0E-7"])
def test_special_decimals_roundtrip(text: str) -> None:
    """Decimal NaN, signalling NaN, infinities and exponents keep their exact form."""
    assert_same(decimal.Decimal(text), roundtrip(decimal.Decimal(text)))


def test_tuple_stays_tuple_and_list_stays_list() -> None:
    """Tuples are not lists: kept apart when nested, inside lists, and as dict keys."""
    value = {(1, (2, (3, (4,)))): [(5,), [6, (7, [8])]], (): []}
    result = roundtrip(value)
    assert_same(value, result)
    assert type(next(iter(result))) is tuple


def test_dict_keys_of_any_hashable_type() -> None:
    """Dict keys keep their types (int, bool, None, tuple, frozenset, frozen dataclass)."""
    value = {2: "i", True: "b", None: "n", (1, "a"): "t", frozenset({2}): "f", Point(1, 2): "p"}
    assert_same(value, roundtrip(value))


def test_sets_and_frozensets_keep_their_type() -> None:
    """set and frozenset decode as themselves, nested in each other too."""
    value = {frozenset({1, frozenset({"a"})}), (1, 2), "x"}
    assert_same(value, roundtrip(value))


def test_bytes_like_values_decode_as_bytes() -> None:
    """bytearray and memoryview are sent as bin and decode as bytes (documented)."""
    assert_same(b"ab", roundtrip(bytearray(b"ab")))
    assert_same(b"cd", roundtrip(memoryview(b"cd")))


@pytest.mark.parametrize(
    "tz",
    [
        dt.UTC,
        dt.timezone(dt.timedelta(hours=5, minutes=30)),
        dt.timezone(dt.timedelta(hours=-3), "BRT"),
        dt.timezone(dt.timedelta(microseconds=-1)),
        zoneinfo.ZoneInfo("Europe/Paris"),
        zoneinfo.ZoneInfo("America/Argentina/Buenos_Aires"),
    ],
    ids=repr,
)
def test_aware_datetimes_keep_their_tzinfo(tz: dt.tzinfo) -> None:
    """Aware datetimes and times decode with the same tzinfo (offset, name or key), not UTC."""
    moment = dt.datetime(2024, 10, 27, 2, 30, 15, 123456, tzinfo=tz, fold=1)
    result = roundtrip(moment)
    assert_same(moment, result)
    assert result.tzinfo == tz
    assert result.fold == 1
    if isinstance(tz, dt.timezone):
        assert_same(dt.time(23, 59, tzinfo=tz), roundtrip(dt.time(23, 59, tzinfo=tz)))


def test_naive_datetime_stays_naive() -> None:
    """A naive datetime decodes naive, with microseconds."""
    moment = dt.datetime(1999, 12, 31, 23, 59, 59, 999999)
    assert roundtrip(moment).tzinfo is None
    assert_same(moment, roundtrip(moment))


# --- enums and dataclasses -------------------------------------------------------------


@pytest.mark.parametrize(
    "member", [Color.RED, Level.HIGH, Mode.SLOW, Perm.W, Perm.R | Perm.X, Perm(0)]
)
def test_enum_members_roundtrip_as_their_class(member: enum.Enum) -> None:
    """Enum, IntEnum, StrEnum and Flag members (composite too) decode as the same member."""
    assert roundtrip(member) is member


def test_int_and_str_enums_do_not_degrade() -> None:
    """IntEnum/StrEnum members decode as members, never as plain int or str."""
    result = roundtrip([Level.LOW, Mode.FAST])
    assert type(result[0]) is Level
    assert type(result[1]) is Mode


def _versioned_enum(values: dict[str, int]) -> type[enum.Enum]:
    """The same Enum (same module and qualname) in two versions, like a reload."""
    Versioned = enum.Enum("Versioned", values)  # type: ignore[misc]  # functional API
    Versioned.__qualname__ = "VersionedEnum"
    return message(Versioned, name="test_codec.Versioned")


def test_enum_travels_by_name_not_value() -> None:
    """Bytes of a member still decode after its value changed: members travel by name."""
    old = _versioned_enum({"A": 1, "B": 2})
    data = encode(old["B"])
    new = _versioned_enum({"A": 10, "B": 20})
    assert decode(data) is new["B"]
    assert b"B" in data


def test_unknown_enum_member_is_a_decode_error() -> None:
    """A member name the Enum does not have raises DecodeError naming it."""
    data = msgpack.packb(msgpack.ExtType(EXT_ENUM, msgpack.packb(["test_codec.Color", "BLUE"])))
    with pytest.raises(DecodeError, match="BLUE"):
        decode(data)


def test_nested_dataclasses_roundtrip() -> None:
    """Registered dataclasses nest in lists, dicts and each other, init=False fields kept."""
    order = Order(7, [Item("a"), Box(Point(1, 2)), (Item("b", 3),)], {"a": Item("a")})
    order.total = 42
    result = roundtrip(order)
    assert_same(order, result)
    assert result.total == 42
    assert type(result.items[1].content) is Point


def test_frozen_slotted_dataclass_with_init_false_field() -> None:
    """Frozen and slotted classes round-trip, including an init=False field that changed."""
    value = Frozen((Point(1, 2), Point(3, 4)))
    object.__setattr__(value, "seen", 9)
    result = roundtrip(value)
    assert_same(value, result)
    assert result.seen == 9


def test_unset_init_false_field_stays_unset() -> None:
    """An init=False field with no default that was never assigned is left unset."""

    @message(name="test_codec.Lazy")
    @dataclass
    class Lazy:
        a: int
        cache: int = field(init=False)

    result = roundtrip(Lazy(1))
    assert result.a == 1
    assert not hasattr(result, "cache")


def _evolving(version: int) -> type[Any]:
    """One dataclass (same module and qualname) in two schema versions."""
    if version == 1:

        @dataclass
        class Evolving:
            a: int

    else:

        @dataclass
        class Evolving:  # type: ignore[no-redef]  # the same class in version 2 is the point
            a: int
            b: str = "default"

    return message(Evolving, name="test_codec.Evolving")


def test_field_added_with_default_decodes_old_bytes() -> None:
    """Bytes written before a field (with a default) existed decode with that default."""
    old_bytes = encode(_evolving(1)(a=1))
    new = _evolving(2)
    result = decode(old_bytes)
    assert type(result) is new
    assert (result.a, result.b) == (1, "default")


def test_removed_field_is_a_decode_error() -> None:
    """Bytes carrying a field the class no longer has raise DecodeError naming type and field."""
    new_bytes = encode(_evolving(2)(a=1, b="x"))
    _evolving(1)
    with pytest.raises(DecodeError, match=r"test_codec\.Evolving.*'b'"):
        decode(new_bytes)


def test_missing_required_field_is_a_decode_error() -> None:
    """A payload lacking a required field fails as DecodeError (the constructor raised)."""
    data = msgpack.packb(msgpack.ExtType(EXT_DATACLASS, msgpack.packb(["test_codec.Item", {}])))
    with pytest.raises(DecodeError, match=r"test_codec\.Item"):
        decode(data)


# --- registry --------------------------------------------------------------------------


def test_message_returns_the_class_and_defaults_to_qualname() -> None:
    """@message returns the class unchanged; the default wire name is the qualname."""

    @dataclass
    class Plain:
        a: int

    assert message(Plain) is Plain
    assert wire_name(Plain) == Plain.__qualname__
    assert is_registered(Plain)
    assert wire_name(Item) == "test_codec.Item"
    assert wire_name(NotRegistered) is None
    assert not is_registered(NotRegistered)


def test_message_refuses_non_dataclasses() -> None:
    """@message on a plain class or an instance raises RegistrationError pointing at @dataclass."""

    class Plain:
        pass

    with pytest.raises(RegistrationError, match="@dataclass"):
        message(Plain)
    with pytest.raises(RegistrationError):
        message(Item("x"))  # type: ignore[call-overload]  # the misuse under test


def test_name_taken_by_another_class_is_refused() -> None:
    """A wire name held by a different class (other qualname) raises, suggesting name=."""

    @dataclass
    class Other:
        a: int

    with pytest.raises(RegistrationError, match="name="):
        message(Other, name="test_codec.Item")
    assert wire_name(Other) is None
    assert decode(encode(Item("a"))) == Item("a")


def test_same_module_and_qualname_replaces_silently() -> None:
    """Re-registering a redefined class (same module and qualname) replaces the old entry."""
    old = _evolving(1)
    new = _evolving(2)
    assert old is not new
    assert wire_name(new) == "test_codec.Evolving"
    assert wire_name(old) is None
    assert type(decode(encode(new(a=1)))) is new


def test_registering_twice_is_idempotent_but_one_name_per_class() -> None:
    """The same class under the same name is a no-op; under a second name it is refused."""
    assert message(Item, name="test_codec.Item") is Item
    with pytest.raises(RegistrationError, match="already registered"):
        message(Item, name="test_codec.Item2")
    assert wire_name(Item) == "test_codec.Item"


# --- concurrency and API -----------------------------------------------------------------


def test_threads_encode_and_decode_concurrently() -> None:
    """Per-thread packers: concurrent encodes in several threads give correct bytes."""
    expected = {i: encode(Order(i, [Item(str(i)), (i, {i})])) for i in range(4)}
    failures: list[int] = []

    def work(i: int) -> None:
        for _ in range(300):
            data = encode(Order(i, [Item(str(i)), (i, {i})]))
            if data != expected[i] or decode(data).id != i:
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []


def test_encode_is_reentrant() -> None:
    """Code run while encoding (here a __getattribute__) may itself encode safely."""
    inner: list[bytes] = []

    @message(name="test_codec.Reentrant")
    @dataclass
    class Reentrant:
        a: list[int]

        def __getattribute__(self, name: str) -> Any:
            if name == "a":
                inner.append(encode([(9,), "inner"]))
            return object.__getattribute__(self, name)

    value = [(1,), Reentrant([1, 2]), "tail"]
    result = roundtrip(value)
    assert result[1].a == [1, 2]
    assert result[2] == "tail"
    assert decode(inner[0]) == [(9,), "inner"]


def test_public_api() -> None:
    """actorflow.actors exports the codec names in a sorted __all__."""
    exported = set(actorflow.actors.__all__)
    codec = {"decode", "decode_state", "encode", "encode_state", "is_registered", "message"}
    assert codec | {"wire_name"} <= exported
    assert actorflow.actors.__all__ == sorted(actorflow.actors.__all__)
