"""Decoding: bytes back into values, rebuilding only registered types.

The wire layout is described in :mod:`._codec`. Decoding never imports a module
and never calls anything but the constructors of types registered with
``@actorflow.message``; anything else is a :class:`~actorflow.errors.DecodeError`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import functools
import operator
import uuid
import zoneinfo
from collections.abc import Callable
from typing import Any

import msgpack
from msgpack import fallback as _fallback

from actorflow.errors import DecodeError

from ._codec import (
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
    _state,
)
from ._registry import Entry, entry_named, qualified_name

__all__ = ["decode"]

# --- decoding ------------------------------------------------------------------------


def _unpack_with(unpackb: Callable[..., Any], data: bytes) -> Any:
    size = len(data)
    return unpackb(
        data,
        ext_hook=_ext_hook,
        strict_map_key=False,
        timestamp=3,
        max_str_len=size,
        max_bin_len=size,
        max_array_len=size,
        max_map_len=size,
        max_ext_len=size,
    )


def _unpack(data: bytes) -> Any:
    """Unpack an ext payload, one nesting level below the current one."""
    state = _state
    depth = state.unpack_depth
    if depth >= MAX_DEPTH:
        raise DecodeError(f"the data nests more than {MAX_DEPTH} tuple/set/dataclass levels")
    state.unpack_depth = depth + 1
    try:
        return _unpack_with(msgpack.unpackb if depth < _C_DEPTH else _fallback.unpackb, data)
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
        try:
            return zoneinfo.ZoneInfo(tz)
        except Exception as exc:  # not found, a directory, unreadable: all bad data
            raise DecodeError(f"unknown time zone {tz!r}: {exc}") from exc
    raise DecodeError(f"malformed time zone payload {tz!r}")


def _decode_datetime(data: bytes) -> dt.datetime:
    y, mo, d, h, mi, s, us, fold, tz = _unpack_list(data, 9, "datetime")
    return dt.datetime(y, mo, d, h, mi, s, us, _decode_tz(tz), fold=fold)


def _decode_time(data: bytes) -> dt.time:
    h, mi, s, us, fold, tz = _unpack_list(data, 6, "time")
    return dt.time(h, mi, s, us, _decode_tz(tz), fold=fold)


_DECODERS: dict[int, Callable[[bytes], object]] = {
    EXT_TUPLE: lambda data: tuple(_unpack_list(data, None, "tuple")),
    EXT_SET: lambda data: set(_unpack_list(data, None, "set")),
    EXT_FROZENSET: lambda data: frozenset(_unpack_list(data, None, "frozenset")),
    EXT_BIGINT: lambda data: int.from_bytes(data, "big", signed=True),
    EXT_DATETIME: _decode_datetime,
    EXT_DATE: lambda data: dt.date(*_unpack_list(data, 3, "date")),
    EXT_TIME: _decode_time,
    EXT_TIMEDELTA: lambda data: dt.timedelta(*_unpack_list(data, 3, "timedelta")),
    EXT_UUID: lambda data: uuid.UUID(bytes=data),
    EXT_DECIMAL: lambda data: decimal.Decimal(data.decode("ascii")),
    EXT_ENUM: _decode_enum,
    EXT_DATACLASS: _decode_dataclass,
}


def _ext_hook(code: int, data: bytes) -> object:
    decoder = _DECODERS.get(code)
    if decoder is None:
        raise DecodeError(f"unknown ext type code {code}: not actorflow's wire format")
    return decoder(data)


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
