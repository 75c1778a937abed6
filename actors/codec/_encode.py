"""The wire format and its encoder: every value in actorflow crosses a boundary as these bytes.

Decoding is the isolation boundary. It never imports a module and never calls
anything but the constructors of classes registered with :func:`message` (plus
the stdlib value types listed below), so stored or received bytes cannot run code.

Wire layout
-----------
A value is one msgpack object. Plain values use msgpack's own types: ``None``,
``bool``, ``int`` in [-2**63, 2**64), ``float`` (always float64, so nan, inf and
-0.0 survive), ``str`` (UTF-8), ``bytes`` (bin; ``bytearray`` and ``memoryview``
are written as bin too and decode as ``bytes``), ``list`` (array) and ``dict``
(map, in insertion order, keys of any encodable hashable type).

Everything else is an ext object whose payload is itself msgpack (one nested
level per ext) unless noted:

=================  ====  ====================================================
constant           code  payload
=================  ====  ====================================================
EXT_TUPLE          1     array of the items
EXT_SET            2     array of the items, in canonical order (see below)
EXT_FROZENSET      3     same as EXT_SET
EXT_BIGINT         4     raw bytes: big-endian two's complement (ints outside
                         the msgpack range only)
EXT_DATETIME       5     [year, month, day, hour, minute, second, microsecond,
                         fold, tz]
EXT_DATE           6     [year, month, day]
EXT_TIME           7     [hour, minute, second, microsecond, fold, tz]
EXT_TIMEDELTA      8     [days, seconds, microseconds]
EXT_UUID           9     raw bytes: the 16 bytes of the UUID
EXT_DECIMAL        10    raw bytes: ``str(value)`` in ASCII (NaN, sNaN,
                         Infinity and signed zeros included)
EXT_ENUM           11    [wire name, member name]; a composite ``Flag`` value
                         writes [wire name, [member names]]
EXT_DATACLASS      12    [wire name, {field name: value}] for every field set
                         on the instance (``init=False`` fields included)
=================  ====  ====================================================

``tz`` is nil (naive), an int (a ``datetime.timezone`` offset in microseconds),
[offset, name] (a ``timezone`` created with an explicit name), or a str (the key
of a ``zoneinfo.ZoneInfo``). Sets are written in a canonical order so that equal
sets give equal bytes in every process: sorted values when every item is an exact
``int``, ``str`` or ``bytes``, else sorted by each item's own encoding.

Ext code -1 (msgpack's timestamp) is never written; if foreign bytes carry one it
decodes as an aware UTC ``datetime``. Every other unknown code is a DecodeError.

Dataclass fields are matched by name, so bytes written before a field (with a
default) was added still decode, and bytes naming a field the class no longer has
raise DecodeError. Enum members travel by name, so changing values is safe.

A ``ZoneInfo`` is rebuilt with ``zoneinfo.ZoneInfo(key)`` only after checking that
the key is a plain relative name naming a file of the system time zone database
(``zoneinfo.TZPATH``), or, when the application has imported the ``tzdata``
package itself, a zone that package lists. Never otherwise: for a key it cannot
find, ``zoneinfo`` imports ``tzdata.zoneinfo.<parts of the key>`` from
``sys.path``, which would let the bytes choose a module to run.

Canonical encodings: a bigint ext holds an int outside the msgpack range, in as
few bytes as it takes; anything else is a DecodeError.

Limits: each declared length is bounded by the input's size, so a short input can
never make the decoder allocate a large object, and there is no smaller cap (a
64 MB bin decodes). Work is bounded too: CPython does not randomise the hashes of
ints, Decimals, UUIDs, tuples and the like, so bytes can hold thousands of set
items or map keys that share one hash, and building the set or map would compare
each with all the others (seconds from under 1 MB). A set, frozenset or map whose
keys have more than MAX_SHARED_HASH equal hashes is a DecodeError; the hashes are
checked before it is built (for maps, only at a nesting level that produced more
than a few dozen such keys, so ordinary maps keep msgpack's C path). Nesting is
bounded: msgpack allows 1024 list/dict levels in one ext payload (its packer accepts 1025: that single extra level is the one value
that encodes but does not decode), and at most MAX_DEPTH ext values nest; beyond
_C_DEPTH ext levels a payload is unpacked by C with its ext values left as
placeholders, decoded only after that C call returned, so the C stack stays small
(encoding past that depth uses the pure-Python msgpack).

Threads: encode reuses one msgpack Packer per thread and nesting level (a Packer
is not thread-safe, and reuse is faster than creating one per call); decode keeps
no state but a per-thread depth counter. Both may be called from any thread.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import functools
import operator
import re
import threading
import uuid
import zoneinfo
from collections.abc import Callable
from typing import Any, cast

import msgpack
from msgpack import fallback as _fallback

from actorflow.errors import EncodeError

from ._registry import Entry, entry_for, qualified_name

EXT_TUPLE = 1
EXT_SET = 2
EXT_FROZENSET = 3
EXT_BIGINT = 4
EXT_DATETIME = 5
EXT_DATE = 6
EXT_TIME = 7
EXT_TIMEDELTA = 8
EXT_UUID = 9
EXT_DECIMAL = 10
EXT_ENUM = 11
EXT_DATACLASS = 12

MAX_DEPTH = 100
"""Most ext values (tuples, sets, dataclasses...) that may nest inside one another."""

MAX_SHARED_HASH = 32
"""Most items of one decoded set or map (keys) that may share one hash value."""

# The C unpacker keeps a ~40 KB parse stack on the C stack for each nested call, and
# the C packer recurses natively; past this many ext levels the pure-Python msgpack
# takes over, whose recursion Python bounds (RecursionError) instead of the C stack.
_C_DEPTH = 8

_FIX_MESSAGE = (
    "register it with @actorflow.message, declare it as a resource (actorflow.resource)"
    " if it is not state, or convert it to a supported type"
)
_ExtType = msgpack.ExtType


def _ext(code: int, payload: bytes) -> object:
    # ExtType's own __new__ re-validates in Python; ours are valid by construction.
    return tuple.__new__(_ExtType, (code, payload))


_ZONE_KEY = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")

# --- encoding ------------------------------------------------------------------------


class _Unsupported(Exception):
    """Internal: ``obj`` cannot be encoded; turned into EncodeError with a path."""

    def __init__(self, obj: object, culprit: type, reason: str) -> None:
        super().__init__(reason)
        self.obj = obj
        self.culprit = culprit
        self.reason = reason


class _TooDeep(Exception):
    """Internal: more than MAX_DEPTH ext values nest inside one another."""


class _ThreadState(threading.local):
    """Per-thread nesting depths and reusable packers (a Packer is not thread-safe)."""

    def __init__(self) -> None:
        self.pack_depth = 0
        self.unpack_depth = 0
        self.packers: list[Any] = []
        # Per unpack level: how many ext values with a hash the bytes can choose it
        # produced (-1: that level builds its maps through the hash check).
        self.hashed = [0] * (MAX_DEPTH + 1)
        # Per unpack level: the ext values decoded so far in this pass (so that a
        # second pass, after a flood check was switched on, reuses them instead of
        # decoding their subtrees again), and how many of them a second pass used.
        self.decoded: list[list[object] | None] = [None] * (MAX_DEPTH + 1)
        self.reused = [-1] * (MAX_DEPTH + 1)
        self.earlier: list[list[object] | None] = [None] * (MAX_DEPTH + 1)


_state = _ThreadState()

# A packer keeps its largest buffer alive; one that produced more than this is
# replaced, so a thread that once encoded a huge state does not hold it forever.
_KEEP_PACKER_BYTES = 4 << 20


def _pack(value: object) -> bytes:
    """Pack ``value`` with the packer of the current nesting level (reentrant)."""
    state = _state
    depth = state.pack_depth
    if depth > MAX_DEPTH:
        raise _TooDeep
    packers = state.packers
    if depth == len(packers):
        packers.append(_new_packer(depth))
    state.pack_depth = depth + 1
    try:
        data = cast(bytes, packers[depth].pack(value))
    finally:
        state.pack_depth = depth
    if len(data) > _KEEP_PACKER_BYTES:
        packers[depth] = _new_packer(depth)
    return data


def _new_packer(depth: int) -> Any:
    impl = msgpack if depth < _C_DEPTH else _fallback
    return impl.Packer(default=_default, strict_types=True, use_bin_type=True, autoreset=True)


def array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` items (its items follow, already packed)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _pack_set(items: set[Any] | frozenset[Any]) -> bytes:
    # Canonical order so equal sets give equal bytes whatever their hash order.
    for exact in (int, str, bytes):
        if all(type(item) is exact for item in items):
            return _pack(sorted(items))
    return array_header(len(items)) + b"".join(sorted(_pack(item) for item in items))


def _tz_payload(value: dt.datetime | dt.time) -> object:
    tz = value.tzinfo
    if tz is None:
        return None
    if type(tz) is dt.timezone:
        offset = tz.utcoffset(None) // dt.timedelta(microseconds=1)
        name = tz.tzname(None)
        return offset if name == dt.timezone(tz.utcoffset(None)).tzname(None) else [offset, name]
    if type(tz) is zoneinfo.ZoneInfo and tz.key is not None:
        return tz.key
    raise _Unsupported(
        value,
        type(tz),
        f"its tzinfo {tz!r} is not supported: use datetime.timezone or"
        " zoneinfo.ZoneInfo(key) (not from_file), or convert the value",
    )


def _encode_enum(member: enum.Enum, entry: Entry) -> object:
    name = member.name
    if name is not None and entry.members is not None and entry.members.get(name) is member:
        return _ext(EXT_ENUM, _pack([entry.name, name]))
    # A composite Flag value (A|B, or none) travels as the names of its members.
    if isinstance(member, enum.Flag):
        parts = list(member)
        if functools.reduce(operator.or_, parts, type(member)(0)) == member:
            return _ext(EXT_ENUM, _pack([entry.name, [part.name for part in parts]]))
    raise _Unsupported(member, entry.cls, f"{member!r} cannot be spelled with member names")


def _encode_dataclass(obj: object, entry: Entry) -> object:
    try:
        values = {name: getattr(obj, name) for name in entry.order}
    except AttributeError:  # an init=False field never assigned: leave it unset
        values = {n: getattr(obj, n) for n in entry.order if hasattr(obj, n)}
    return _ext(EXT_DATACLASS, _pack([entry.name, values]))


def _encode_bigint(n: int) -> object:
    return _ext(EXT_BIGINT, n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True))


def _encode_datetime(v: dt.datetime) -> object:
    fields = [v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.fold]
    return _ext(EXT_DATETIME, _pack([*fields, _tz_payload(v)]))


def _encode_time(v: dt.time) -> object:
    fields = [v.hour, v.minute, v.second, v.microsecond, v.fold, _tz_payload(v)]
    return _ext(EXT_TIME, _pack(fields))


_ENCODERS: dict[type, Callable[[Any], object]] = {
    tuple: lambda v: _ext(EXT_TUPLE, _pack(list(v))),
    set: lambda v: _ext(EXT_SET, _pack_set(v)),
    frozenset: lambda v: _ext(EXT_FROZENSET, _pack_set(v)),
    int: _encode_bigint,
    dt.datetime: _encode_datetime,
    dt.date: lambda v: _ext(EXT_DATE, _pack([v.year, v.month, v.day])),
    dt.time: _encode_time,
    dt.timedelta: lambda v: _ext(EXT_TIMEDELTA, _pack([v.days, v.seconds, v.microseconds])),
    uuid.UUID: lambda v: _ext(EXT_UUID, v.bytes),
    decimal.Decimal: lambda v: _ext(EXT_DECIMAL, str(v).encode("ascii")),
}

_BUILTIN_BASES = (str, bytes, int, float, list, dict, tuple, set, frozenset)


def _default(obj: object) -> object:
    """msgpack's hook: called only for values msgpack cannot pack natively."""
    tp = type(obj)
    encoder = _ENCODERS.get(tp)
    if encoder is not None:
        return encoder(obj)
    entry = entry_for(tp)
    if entry is not None:
        if entry.members is not None:
            return _encode_enum(cast(enum.Enum, obj), entry)
        return _encode_dataclass(obj, entry)
    if isinstance(obj, enum.Enum):
        reason = f"its Enum class {qualified_name(tp)} is not registered: {_FIX_MESSAGE}"
    elif isinstance(obj, _BUILTIN_BASES):
        base = next(b for b in _BUILTIN_BASES if isinstance(obj, b))
        reason = (
            f"it subclasses {base.__name__}, and a subclass is never sent as its base type:"
            f" {_FIX_MESSAGE}"
        )
    else:
        reason = _FIX_MESSAGE
    raise _Unsupported(obj, tp, reason)


def encode(value: object) -> bytes:
    """Encode ``value`` into actorflow's wire format.

    Args:
        value: a value made of the supported types (see the module docstring).

    Returns:
        Bytes that :func:`decode` turns back into an equal value of the same types.
        The caller owns them.

    Raises:
        EncodeError: some part of ``value`` has an unsupported type (the message names
            the type and where in ``value`` it was found), or it nests too deeply.
    """
    return encode_at(value, "value")


def encode_at(value: object, label: str) -> bytes:
    """Like :func:`encode`, naming the root ``label`` in error paths (e.g. ``state['x']``)."""
    try:
        return _pack(value)
    except _Unsupported as exc:
        target = exc.obj
        path = _find_path(value, lambda o: o is target, _root_label(value, label))
        raise EncodeError(
            f"cannot encode a value of type {qualified_name(exc.culprit)!r} at {path}:"
            f" {exc.reason}",
            type_name=qualified_name(exc.culprit),
        ) from None
    except UnicodeEncodeError:
        path = _find_path(value, _bad_str, _root_label(value, label))
        raise EncodeError(
            f"cannot encode the str at {path}: it holds a lone surrogate, which is not"
            " valid UTF-8; convert it (e.g. s.encode('utf-8', 'surrogatepass')) first",
            type_name="str",
        ) from None
    except (_TooDeep, RecursionError, ValueError) as exc:
        if isinstance(exc, ValueError) and "recursion" not in str(exc):
            problem = f"msgpack refused it: {exc}"  # e.g. a bytes object over 4 GiB
        else:
            problem = (
                f"it nests too deeply (at most 1024 list/dict levels in a row and {MAX_DEPTH}"
                " tuple/set/dataclass levels) or holds a reference cycle"
            )
        raise EncodeError(
            f"cannot encode {label}: {problem}", type_name=qualified_name(type(value))
        ) from None


def _find_path(root: object, match: Callable[[object], bool], label: str) -> str:
    """Where the first value ``match`` accepts sits in ``root``, e.g. ``Order.items[3]``.

    Walked only to report an error, in encoding order, without recursion.
    """
    stack: list[tuple[object, str]] = [(root, label)]
    seen: set[int] = set()
    while stack:
        obj, path = stack.pop()
        if match(obj):
            return path
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        entry = entry_for(type(obj))
        children: list[tuple[object, str]] = []
        if isinstance(obj, list | tuple):
            children = [(item, f"{path}[{i}]") for i, item in enumerate(obj)]
        elif isinstance(obj, dict):
            for key, item in obj.items():
                children += [(key, f"{path} key {_short(key)}"), (item, f"{path}[{_short(key)}]")]
        elif isinstance(obj, set | frozenset):
            children = [(item, f"{path} item {_short(item)}") for item in obj]
        elif entry is not None:
            children = [(getattr(obj, n), f"{path}.{n}") for n in entry.order if hasattr(obj, n)]
        stack.extend(reversed(children))
    return label


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bad_str(obj: object) -> bool:
    if type(obj) is not str:
        return False
    try:
        obj.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _root_label(value: object, label: str) -> str:
    entry = entry_for(type(value))
    return entry.cls.__qualname__ if label == "value" and entry is not None else label
