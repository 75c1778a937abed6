"""Decoding: bytes back into values, rebuilding only registered types.

The wire layout is described in :mod:`._encode`. Decoding never imports a module
and never calls anything but the constructors of types registered with
``@actorflow.message``; anything else is a :class:`~actorflow.errors.DecodeError`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import functools
import operator
import os
import sys
import uuid
import zoneinfo
from collections.abc import Callable, Iterable
from typing import Any

import msgpack

from actorflow.errors import DecodeError

from ._encode import (
    _C_DEPTH,
    _ZONE_KEY,
    EXT_BIGINT,
    EXT_DATACLASS,
    EXT_DATE,
    EXT_DATETIME,
    EXT_DECIMAL,
    EXT_ENUM,
    EXT_FROZENSET,
    EXT_SET,
    EXT_TIME,
    EXT_TIMEDELTA,
    EXT_TUPLE,
    EXT_UUID,
    MAX_DEPTH,
    MAX_SHARED_HASH,
    _state,
)
from ._registry import Entry, entry_named, qualified_name

__all__ = ["decode"]

# --- decoding ------------------------------------------------------------------------


# Past _C_DEPTH, a payload shorter than this is still unpacked by C with its ext
# values decoded as they come: each nested ext takes at least 3 bytes, so it adds at
# most ~10 C levels (~400 KB of C stack) however deep it sits. Longer ones are
# unpacked by C with ext values left as placeholders, decoded once that C call has
# returned (see _unpack_deferred), so C levels never pile up.
_C_SMALL = 32
_ExtType = msgpack.ExtType


class _Pairs(list[Any]):
    """A map's pairs, as a deferred unpack returns them (built into a dict later)."""


def _unpack_deferred(data: bytes) -> Any:
    """Unpack with C, leaving ext values as placeholders, then decode those in Python.

    The C unpacker returns before any nested payload is decoded, so its parse stack
    (~40 KB of C stack) is never held by more than one level at a time, and the
    pure-Python unpacker, ~6x slower per value, is not needed. Maps are built
    afterwards, innermost first, through the hash check.
    """
    size = len(data)
    root = msgpack.unpackb(
        data,
        object_pairs_hook=_Pairs,
        strict_map_key=False,
        timestamp=3,
        max_str_len=size,
        max_bin_len=size,
        max_array_len=size,
        max_map_len=size,
        max_ext_len=size,
    )
    depth = _state.unpack_depth
    _state.hashed[depth] = -1  # maps are checked here, not counted
    _state.decoded[depth] = None
    _state.reused[depth] = -1
    holder = [root]
    maps: list[tuple[list[Any], int]] = []  # where each map sits, outer ones first
    stack: list[list[Any]] = [holder]
    while stack:
        container = stack.pop()
        for i, item in enumerate(container):
            kind = type(item)
            if kind is _ExtType:
                container[i] = _ext_hook(item.code, item.data)
            elif kind is list:
                stack.append(item)
            elif kind is _Pairs:
                maps.append((container, i))
                pairs = [list(pair) for pair in item]
                item[:] = pairs
                stack.extend(pairs)
    for container, i in reversed(maps):
        container[i] = _checked_map([(k, v) for k, v in container[i]])
    return holder[0]


class _Flood(Exception):
    """Internal: one unpack level made many keys whose hash the bytes choose."""


# An ext value whose hash the bytes can choose (not a str-like hash, which CPython
# randomises per process). Past this many at one level, that level is decoded again
# with every map built through :func:`_checked_map`: the wasted work is at most
# this many values, and until then at most this many keys could have collided.
_FLOOD_EXTS = 64
_PLAIN_KEYS = (str, bytes)


def _unpack_with(unpackb: Callable[..., Any], data: bytes) -> Any:
    state = _state
    depth = state.unpack_depth
    state.hashed[depth] = 0
    decoded: list[object] = []
    state.decoded[depth] = decoded
    state.reused[depth] = -1
    try:
        return _unpackb(unpackb, data, None)
    except _Flood:
        # Again with every map of this level built through the hash check. The ext
        # values the first pass decoded come back in the same order and are reused:
        # decoding their subtrees again would make work grow with the nesting
        # (twice per level), which bytes could chain into an exponential.
        state.hashed[depth] = -1  # counted no more: this level's maps are checked
        state.decoded[depth] = None
        state.reused[depth] = 0
        state.earlier[depth] = decoded
        try:
            return _unpackb(unpackb, data, _checked_map)
        finally:
            state.reused[depth] = -1
            state.earlier[depth] = None


def _unpackb(unpackb: Callable[..., Any], data: bytes, pairs_hook: Any) -> Any:
    size = len(data)
    return unpackb(
        data,
        ext_hook=_ext_hook,
        object_pairs_hook=pairs_hook,
        strict_map_key=False,
        timestamp=3,
        max_str_len=size,
        max_bin_len=size,
        max_array_len=size,
        max_map_len=size,
        max_ext_len=size,
    )


def check_hashes(keys: Iterable[object], what: str) -> None:
    """Refuse keys of which more than MAX_SHARED_HASH share one hash (see ._encode).

    Raises:
        DecodeError: they do (or one is unhashable).
    """
    counts: dict[int, int] = {}
    for key in keys:
        if type(key) in _PLAIN_KEYS:
            continue  # randomised hashes: no input can make them collide
        h = hash(key)
        n = counts.get(h, 0) + 1
        if n > MAX_SHARED_HASH:
            raise DecodeError(
                f"refusing a {what} in which more than {MAX_SHARED_HASH} keys share one hash:"
                " such data makes decoding quadratic (a hash-flooding input), and actorflow"
                " never writes it"
            )
        counts[h] = n


def _checked_map(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    if len(pairs) > MAX_SHARED_HASH:
        check_hashes([k for k, _ in pairs], "map")
    return dict(pairs)


def _checked_items(data: bytes, what: str) -> list[Any]:
    items = _unpack_list(data, None, what)
    if len(items) > MAX_SHARED_HASH:
        check_hashes(items, what)
    return items


def _unpack(data: bytes) -> Any:
    """Unpack an ext payload, one nesting level below the current one."""
    state = _state
    depth = state.unpack_depth
    if depth >= MAX_DEPTH:
        raise DecodeError(f"the data nests more than {MAX_DEPTH} tuple/set/dataclass levels")
    state.unpack_depth = depth + 1
    try:
        if depth < _C_DEPTH or len(data) < _C_SMALL:
            return _unpack_with(msgpack.unpackb, data)
        return _unpack_deferred(data)
    finally:
        state.unpack_depth = depth


def _unpack_list(data: bytes, length: int | None, what: str) -> list[Any]:
    value = _unpack(data)
    if type(value) is not list or (length is not None and len(value) != length):
        raise DecodeError(f"malformed {what} payload")
    return value


def _decode_dataclass(data: bytes) -> object:
    name, values = _unpack_list(data, 2, "dataclass")
    entry = entry_named(name)
    if entry.members is not None or type(values) is not dict:
        raise DecodeError(f"malformed payload for {name!r}: expected dataclass fields")
    if values.keys() <= entry.init:  # the common case: every field goes to the constructor
        kwargs: dict[str, object] = values
        late: list[tuple[str, object]] = []
    else:
        kwargs, late = _split_fields(name, entry, values)
    try:
        obj = entry.cls(**kwargs)
    except Exception as exc:  # any constructor failure means the bytes do not fit the class
        raise DecodeError(f"constructing {name!r} failed: {type(exc).__name__}: {exc}") from exc
    for key, value in late:
        # init=False fields, set as dataclasses do, so frozen and slotted classes work too.
        object.__setattr__(obj, key, value)
    return obj


def _split_fields(
    name: str, entry: Entry, values: dict[Any, Any]
) -> tuple[dict[str, object], list[tuple[str, object]]]:
    """Constructor arguments and init=False fields; DecodeError for unknown fields."""
    kwargs: dict[str, object] = {}
    late: list[tuple[str, object]] = []
    for key, value in values.items():
        if key in entry.init:
            kwargs[key] = value
        elif key in entry.fields:
            late.append((key, value))
        else:
            raise DecodeError(
                f"the data for {name!r} has a field {key!r} that {qualified_name(entry.cls)}"
                " no longer has: restore the field, or convert the stored data"
            )
    return kwargs, late


def _decode_enum(data: bytes) -> object:
    name, member = _unpack_list(data, 2, "Enum")
    entry = entry_named(name)
    members = entry.members
    if members is None:
        raise DecodeError(f"malformed payload for {name!r}: expected an Enum member")
    names = member if type(member) is list and issubclass(entry.cls, enum.Flag) else [member]
    found = [members.get(m) if type(m) is str else None for m in names]
    if None in found:
        raise DecodeError(f"Enum {name!r} has no member named {member!r}")
    if type(member) is list:  # a composite Flag value
        return functools.reduce(operator.or_, found, entry.cls(0))
    return found[0]


def _decode_tz(tz: object) -> dt.tzinfo | None:
    if tz is None:
        return None
    if type(tz) is int:
        return dt.timezone(dt.timedelta(microseconds=tz))
    if type(tz) is list and len(tz) == 2 and type(tz[0]) is int and type(tz[1]) is str:
        return dt.timezone(dt.timedelta(microseconds=tz[0]), tz[1])
    if type(tz) is str and _ZONE_KEY.fullmatch(tz):
        if not _known_zone(tz):
            raise DecodeError(
                f"unknown time zone {tz!r}: not in the system time zone database"
                f" ({', '.join(zoneinfo.TZPATH) or 'zoneinfo.TZPATH is empty'}); install the"
                " system's tzdata, or import the tzdata package before decoding"
            )
        try:
            return zoneinfo.ZoneInfo(tz)
        except Exception as exc:  # not a TZif file, unreadable: all bad data
            raise DecodeError(f"unknown time zone {tz!r}: {exc}") from exc
    raise DecodeError(f"malformed time zone payload {tz!r}")


def _known_zone(key: str) -> bool:
    """Whether ``ZoneInfo(key)`` finds ``key`` without importing anything.

    ``zoneinfo`` looks for the key's file in ``TZPATH`` first (what this checks,
    the same way) and only then imports ``tzdata.zoneinfo.<parts of key>``. That
    fallback is allowed only when the application imported ``tzdata`` itself, and
    only for a zone its own ``zones`` list names, so the import stays inside the
    installed package's folder.
    """
    for folder in zoneinfo.TZPATH:
        if os.path.isfile(os.path.join(folder, key)):
            return True
    tzdata = sys.modules.get("tzdata")
    return tzdata is not None and key in _tzdata_zones(tuple(getattr(tzdata, "__path__", ())))


@functools.cache
def _tzdata_zones(folders: tuple[str, ...]) -> frozenset[str]:
    """The zones an imported ``tzdata`` package lists (read as a file, not imported)."""
    for folder in folders:
        try:
            with open(os.path.join(folder, "zones"), encoding="utf-8") as f:
                return frozenset(line.strip() for line in f if line.strip())
        except OSError:
            continue
    return frozenset()


def _decode_datetime(data: bytes) -> dt.datetime:
    y, mo, d, h, mi, s, us, fold, tz = _unpack_list(data, 9, "datetime")
    return dt.datetime(y, mo, d, h, mi, s, us, _decode_tz(tz), fold=fold)


def _decode_time(data: bytes) -> dt.time:
    h, mi, s, us, fold, tz = _unpack_list(data, 6, "time")
    return dt.time(h, mi, s, us, _decode_tz(tz), fold=fold)


def _decode_bigint(data: bytes) -> int:
    n = int.from_bytes(data, "big", signed=True)
    if -(1 << 63) <= n < 1 << 64 or len(data) != (n.bit_length() + 8) // 8:
        raise DecodeError("non-canonical bigint payload: actorflow never writes it")
    return n


_DECODERS: dict[int, Callable[[bytes], object]] = {
    EXT_TUPLE: lambda data: tuple(_unpack_list(data, None, "tuple")),
    EXT_SET: lambda data: set(_checked_items(data, "set")),
    EXT_FROZENSET: lambda data: frozenset(_checked_items(data, "frozenset")),
    EXT_BIGINT: _decode_bigint,
    EXT_DATETIME: _decode_datetime,
    EXT_DATE: lambda data: dt.date(*_unpack_list(data, 3, "date")),
    EXT_TIME: _decode_time,
    EXT_TIMEDELTA: lambda data: dt.timedelta(*_unpack_list(data, 3, "timedelta")),
    EXT_UUID: lambda data: uuid.UUID(bytes=data),
    EXT_DECIMAL: lambda data: decimal.Decimal(data.decode("ascii")),
    EXT_ENUM: _decode_enum,
    EXT_DATACLASS: _decode_dataclass,
}


# Ext values that may be map keys with a hash chosen by the bytes: everything
# hashable but Enum members (hashed by name, a str) and sets (unhashable).
_CHOSEN_HASH = frozenset(
    {
        EXT_TUPLE,
        EXT_FROZENSET,
        EXT_BIGINT,
        EXT_DATETIME,
        EXT_DATE,
        EXT_TIME,
        EXT_TIMEDELTA,
        EXT_UUID,
        EXT_DECIMAL,
    }
)


def _ext_hook(code: int, data: bytes) -> object:
    state = _state
    depth = state.unpack_depth
    reused = state.reused[depth]
    if reused >= 0:  # a second pass (see _unpack_with): the first one decoded these
        earlier = state.earlier[depth]
        if earlier is not None and reused < len(earlier):
            state.reused[depth] = reused + 1
            return earlier[reused]
    decoder = _DECODERS.get(code)
    if decoder is None:
        raise DecodeError(f"unknown ext type code {code}: not actorflow's wire format")
    value = decoder(data)
    decoded = state.decoded[depth]
    if decoded is not None:
        decoded.append(value)
    if code in _CHOSEN_HASH or (code == EXT_DATACLASS and type(value).__hash__ is not None):
        hashed = state.hashed
        count = hashed[depth]
        if count >= 0:
            if count >= _FLOOD_EXTS:
                raise _Flood
            hashed[depth] = count + 1
    return value


def decode(data: bytes) -> Any:
    """Decode bytes written by :func:`encode`.

    Args:
        data: the bytes (``bytes``, ``bytearray`` or ``memoryview``); not retained.

    Returns:
        A new value, owned by the caller; nothing in it is shared with other calls.

    Raises:
        DecodeError: for anything but a well-formed encoding of registered types:
            garbage, truncated or tampered bytes, an unknown wire name or field, a
            constructor that raised, or data nested too deeply. Never another type.
    """
    try:
        return _unpack_with(msgpack.unpackb, data)
    except DecodeError:
        raise
    except RecursionError:
        raise DecodeError("the data nests too deeply to decode") from None
    except Exception as exc:  # untrusted bytes: every failure is a DecodeError
        raise DecodeError(f"malformed data: {type(exc).__name__}: {exc}") from exc
