"""The wire codec: exact round trips, the registry, errors, and hostile bytes."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import decimal
import enum
import importlib.abc
import math
import os
import pickle
import struct
import sys
import threading
import uuid
import zoneinfo
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import actorflow.actors
from actorflow.actors import decode, encode, is_registered, message, wire_name
from actorflow.actors._codec import EXT_DATACLASS, EXT_ENUM, EXT_TUPLE, MAX_DEPTH
from actorflow.errors import DecodeError, EncodeError, RegistrationError

# --- registered test types (explicit names: other test modules register their own) ----


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


class _CustomTz(dt.tzinfo):
    def utcoffset(self, d: dt.datetime | None) -> dt.timedelta:
        return dt.timedelta(hours=1)

    def dst(self, d: dt.datetime | None) -> dt.timedelta:
        return dt.timedelta(0)

    def tzname(self, d: dt.datetime | None) -> str:
        return "CUSTOM"


def test_unsupported_tzinfo_is_an_encode_error() -> None:
    """A tzinfo that cannot be rebuilt without code (custom, ZoneInfo.from_file) is refused."""
    with pytest.raises(EncodeError, match="_CustomTz") as info:
        encode({"when": dt.datetime(2020, 1, 1, tzinfo=_CustomTz())})
    assert "value['when']" in str(info.value)
    with open(os.path.join(zoneinfo.TZPATH[0], "UTC"), "rb") as f:
        from_file = zoneinfo.ZoneInfo.from_file(f)
    with pytest.raises(EncodeError, match="from_file"):
        encode(dt.datetime(2020, 1, 1, tzinfo=from_file))


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


# --- encode errors ---------------------------------------------------------------------


def test_unregistered_type_names_type_and_path() -> None:
    """An unregistered object raises EncodeError naming its type, its path and the fix."""
    order = Order(1, [Item("a"), Item("b"), Item("c"), NotRegistered(1)])
    with pytest.raises(EncodeError) as info:
        encode(order)
    message_text = str(info.value)
    assert "NotRegistered" in message_text
    assert "Order.items[3]" in message_text
    assert "@actorflow.message" in message_text
    assert "actorflow.resource" in message_text
    assert info.value.type_name.endswith("NotRegistered")
    assert info.value.executor is None


def test_path_through_dict_and_tuple() -> None:
    """The error path follows dict keys and tuple indexes."""
    with pytest.raises(EncodeError, match=r"value\['cache'\]\[1\]"):
        encode({"ok": 1, "cache": (1, object())})


@pytest.mark.parametrize(
    "value",
    [
        MyStr("x"),
        collections.OrderedDict(a=1),
        collections.defaultdict(list),
        Pair(1, 2),
        Unregistered.A,
        NotRegistered(1),
        object(),
        1j,
    ],
    ids=lambda v: type(v).__name__,
)
def test_unsupported_values_raise_encode_error(value: object) -> None:
    """Subclasses of builtins, unregistered enums and other objects never degrade silently."""
    with pytest.raises(EncodeError) as info:
        encode([value])
    assert type(value).__qualname__ in info.value.type_name


def test_str_subclass_error_explains_subclassing() -> None:
    """A str subclass is refused with a message saying subclasses are not sent as the base."""
    with pytest.raises(EncodeError, match="subclasses str"):
        encode({"name": MyStr("x")})


def test_lone_surrogate_is_an_encode_error() -> None:
    """A str that is not valid UTF-8 raises EncodeError with its path, not UnicodeError."""
    with pytest.raises(EncodeError, match=r"value\[1\]"):
        encode(["ok", "bad\ud800"])


def test_deep_nesting_is_an_encode_error() -> None:
    """Too-deep lists, too-deep tuples and reference cycles raise EncodeError."""
    lists: list[Any] = []
    for _ in range(5000):
        lists = [lists]
    cycle: list[Any] = []
    cycle.append(cycle)
    for value in (lists, cycle):
        with pytest.raises(EncodeError, match="nests too deeply"):
            encode(value)


def _nested_tuples(levels: int) -> tuple[Any, ...]:
    value: tuple[Any, ...] = ()
    for _ in range(levels - 1):
        value = (value,)
    return value


def test_ext_nesting_limit_is_the_same_both_ways() -> None:
    """MAX_DEPTH nested tuples encode and decode; one more is refused by both sides."""
    assert_same(_nested_tuples(MAX_DEPTH), roundtrip(_nested_tuples(MAX_DEPTH)))
    with pytest.raises(EncodeError):
        encode(_nested_tuples(MAX_DEPTH + 1))
    data = msgpack.packb(())
    for _ in range(MAX_DEPTH + 1):
        data = msgpack.packb(msgpack.ExtType(EXT_TUPLE, data))
    with pytest.raises(DecodeError, match="nests"):
        decode(data)


def test_deep_dataclass_chain_in_a_small_thread_stack() -> None:
    """A 100-deep chain of dataclasses round-trips even on a 1 MiB thread stack."""
    chain: Any = None
    for _ in range(MAX_DEPTH - 1):
        chain = Box(chain)
    results: list[Any] = []

    def work() -> None:
        results.append(roundtrip(chain))

    old = threading.stack_size(1 << 20)
    try:
        thread = threading.Thread(target=work)
        thread.start()
    finally:
        threading.stack_size(old)
    thread.join(timeout=30)
    assert len(results) == 1
    assert_same(chain, results[0])


# --- hostile bytes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", b"\x92\x01", b"\x01\x02", b"\xd4\x63\x00", b"\xc7\x03\x0c\x91\xc0\xc0"],
    ids=repr,
)
def test_malformed_bytes_raise_decode_error(data: bytes) -> None:
    """Reserved bytes, truncation, trailing data and unknown ext codes raise DecodeError."""
    with pytest.raises(DecodeError):
        decode(data)


@pytest.mark.parametrize("data", [None, "text", 12, [b"\x01"]], ids=repr)
def test_non_bytes_input_raises_decode_error(data: Any) -> None:
    """Passing something that is not bytes raises DecodeError, not TypeError."""
    with pytest.raises(DecodeError):
        decode(data)


def test_unknown_wire_name_is_a_decode_error() -> None:
    """A wire name nobody registered raises DecodeError telling to import its module."""
    data = msgpack.packb(msgpack.ExtType(EXT_DATACLASS, msgpack.packb(["nowhere.Ghost", {}])))
    with pytest.raises(DecodeError, match="not registered in this process") as info:
        decode(data)
    assert "nowhere.Ghost" in str(info.value)


class _ImportRecorder(importlib.abc.MetaPathFinder):
    """A meta-path finder that records every import attempted while installed."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        self.names.append(fullname)


class _Evil:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("echo pwned",))


def test_crafted_payloads_import_and_call_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ext payloads naming os.system or modules, and pickles, fail without importing or calling."""
    crafted = [
        msgpack.packb(
            msgpack.ExtType(EXT_DATACLASS, msgpack.packb(["os.system", {"command": "x"}]))
        ),
        msgpack.packb(msgpack.ExtType(EXT_ENUM, msgpack.packb(["os.system", "x"]))),
        msgpack.packb(msgpack.ExtType(EXT_DATACLASS, msgpack.packb(["smtplib_never.SMTP", {}]))),
        msgpack.packb(msgpack.ExtType(EXT_DATACLASS, pickle.dumps(_Evil()))),
        msgpack.packb(msgpack.ExtType(42, pickle.dumps(_Evil()))),
        pickle.dumps(_Evil()),
        pickle.dumps(_Evil(), protocol=0),
    ]
    calls: list[object] = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: calls.append(a))
    recorder = _ImportRecorder()
    monkeypatch.setattr(sys, "meta_path", [recorder, *sys.meta_path])
    for data in crafted:
        with pytest.raises(DecodeError):
            decode(data)
    assert calls == []
    assert recorder.names == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_only_raise_decode_error(data: bytes) -> None:
    """Random bytes either decode to some value or raise DecodeError, nothing else."""
    try:
        decode(data)
    except DecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(values, st.data())
def test_bit_flipped_encodings_only_raise_decode_error(value: object, data: st.DataObject) -> None:
    """A valid encoding with one bit flipped decodes to some value or raises DecodeError."""
    encoded = bytearray(encode(value))
    index = data.draw(st.integers(0, len(encoded) - 1))
    encoded[index] ^= 1 << data.draw(st.integers(0, 7))
    try:
        decode(bytes(encoded))
    except DecodeError:
        pass


def test_foreign_msgpack_timestamp_decodes_as_utc_datetime() -> None:
    """msgpack's own timestamp ext (never written by us) decodes as an aware UTC datetime."""
    data = msgpack.packb(msgpack.Timestamp(1, 0))
    assert decode(data) == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)


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
