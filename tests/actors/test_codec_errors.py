"""The wire codec's failures: unsupported values, deep nesting, hostile bytes."""

from __future__ import annotations

import collections
import datetime as dt
import importlib.abc
import os
import pickle
import sys
import threading
import zoneinfo
from dataclasses import dataclass
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorflow.actors import decode, encode, from_json, message
from actorflow.actors.codec._encode import EXT_DATACLASS, EXT_ENUM, EXT_TUPLE, MAX_DEPTH
from actorflow.errors import DecodeError, EncodeError
from tests.support.codec_samples import (
    Box,
    Item,
    MyStr,
    NotRegistered,
    Order,
    Pair,
    Unregistered,
    assert_same,
    roundtrip,
    values,
)

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


@message(name="codec_errors.Parcel")
@dataclass
class _Parcel:
    weight: int


@pytest.mark.parametrize(
    "written", [f"{__name__}._Parcel", "_Parcel"], ids=["module path", "class name"]
)
def test_a_registered_class_named_another_way_is_pointed_to(written: str) -> None:
    """A name that is a registered class's module path or class name, not its wire name
    (as a person writes a service's "$type"), names the wire name to use instead."""
    with pytest.raises(DecodeError) as info:
        from_json({"$type": written, "weight": 3})
    text = str(info.value)
    assert f"no type is registered as {written!r}" in text
    assert "registered as 'codec_errors.Parcel'; use that name" in text
    assert from_json({"$type": "codec_errors.Parcel", "weight": 3}) == _Parcel(3)


def test_an_unknown_name_lists_the_registered_names_close_to_it() -> None:
    """A misspelt wire name lists the registered names close to it, then says to import
    the module of a class this process does not know."""
    with pytest.raises(DecodeError) as info:
        from_json({"$type": "codec_errors.Parcle", "weight": 3})
    text = str(info.value)
    assert "registered names close to it: 'codec_errors.Parcel'" in text
    assert "import the module that defines it" in text


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
