"""Message values as JSON and back, for clients that speak JSON (the service API, forms).

JSON has no registered types, so values cross it in a plain shape:

- a registered dataclass is an object of its fields plus ``"$type"``: its wire name;
- a registered Enum is ``{"$type": name, "$member": member name}``;
- ``bytes`` is ``{"$bytes": base64}``; tuples, sets and frozensets are arrays;
- anything else the codec carries (datetimes, decimals, UUIDs, ...) is its text.

Reading JSON back takes the type the receiver expects (a handler's input type, a
request's response type, by label): an object becomes that dataclass even without
``"$type"`` (a client writes ``{"approved": true, "note": "ok"}`` for a
``Decision``), its fields converted by their annotations. Only registered types are
ever built, as when decoding bytes: nothing is imported or called by name.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, Union

from actorflow.errors import DecodeError

from ._registry import entry_for, entry_named, wire_name

__all__ = ["from_json", "to_json", "type_named"]

_BUILTINS: dict[str, type] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "bytes": bytes,
    "list": list,
    "dict": dict,
    "NoneType": type(None),
}


def to_json(value: Any) -> Any:
    """``value`` (anything a message may hold) as plain JSON data (see the module docstring)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, enum.Enum) and wire_name(type(value)) is not None:
        return {"$type": wire_name(type(value)), "$member": value.name}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = wire_name(type(value))
        out: dict[str, Any] = {"$type": name} if name is not None else {}
        for field in dataclasses.fields(value):
            out[field.name] = to_json(getattr(value, field.name))
        return out
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [to_json(item) for item in items]
    return str(value)


def type_named(label: str) -> type | None:
    """The class a type label names in this process: a builtin, or a registered type
    (``None`` for ``object``, a label of several types, or one not registered here)."""
    if label in _BUILTINS:
        return _BUILTINS[label]
    try:
        return entry_named(label).cls
    except DecodeError:
        return None


def from_json(data: Any, label: str = "object") -> Any:
    """JSON ``data`` as a value of the type ``label`` names (see :func:`type_named`).

    Raises:
        DecodeError: ``data`` cannot be that type (the message names the field and
            what was expected), or names an unregistered ``"$type"``.
    """
    expected = type_named(label) if label != "object" else None
    return _coerce(data, expected if expected is not None else Any, "value")


def _coerce(data: Any, tp: Any, where: str) -> Any:
    """``data`` as type ``tp`` (an annotation), or as found when ``tp`` says nothing."""
    if isinstance(data, dict) and "$bytes" in data:
        try:
            return base64.b64decode(data["$bytes"], validate=True)
        except (ValueError, TypeError) as exc:
            raise DecodeError(f"{where}: $bytes is not base64") from exc
    if isinstance(data, dict) and "$type" in data:
        entry = entry_named(data["$type"])
        return _build(entry.cls, data, where)
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        if isinstance(data, list):
            return [_coerce(item, Any, f"{where}[{i}]") for i, item in enumerate(data)]
        if isinstance(data, dict):
            return {k: _coerce(v, Any, f"{where}[{k!r}]") for k, v in data.items()}
        return data
    if origin in (Union, types.UnionType):
        return _union(data, typing.get_args(tp), where)
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple, set, frozenset):
        if not isinstance(data, list):
            raise DecodeError(f"{where}: expected an array, got {_kind(data)}")
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            items = [
                _coerce(v, a, f"{where}[{i}]")
                for i, (v, a) in enumerate(zip(data, args, strict=False))
            ]
        else:
            item = args[0] if args else Any
            items = [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(data)]
        container = origin or tp
        return items if container is list else container(items)
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(data, dict):
            raise DecodeError(f"{where}: expected an object, got {_kind(data)}")
        args = typing.get_args(tp)
        value_type = args[1] if len(args) == 2 else Any
        return {k: _coerce(v, value_type, f"{where}[{k!r}]") for k, v in data.items()}
    if isinstance(tp, type):
        if entry_for(tp) is not None:
            return _build(tp, data, where)
        if tp is float and isinstance(data, int) and not isinstance(data, bool):
            return float(data)
        if tp is type(None) and data is None:
            return None
        if isinstance(data, tp) and not (tp is int and isinstance(data, bool)):
            return data
        raise DecodeError(f"{where}: expected {tp.__name__}, got {_kind(data)}")
    return data  # an annotation this reader does not interpret: taken as given


def _union(data: Any, options: tuple[Any, ...], where: str) -> Any:
    problems = []
    for option in options:
        try:
            return _coerce(data, option, where)
        except DecodeError as exc:
            problems.append(str(exc))
    raise DecodeError(f"{where}: fits none of the union's types ({'; '.join(problems)})")


def _build(cls: type, data: Any, where: str) -> Any:
    """A registered class ``cls`` from JSON ``data``."""
    entry = entry_for(cls)
    assert entry is not None
    if entry.members is not None:  # an Enum: by member name, or by value
        member = data.get("$member") if isinstance(data, dict) else data
        if isinstance(member, str) and member in entry.members:
            return entry.members[member]
        for value in entry.members.values():
            if value.value == member:
                return value
        raise DecodeError(f"{where}: {member!r} is not a member of {entry.name}")
    if not isinstance(data, dict):
        raise DecodeError(f"{where}: expected an object for {entry.name}, got {_kind(data)}")
    fields = {k: v for k, v in data.items() if k != "$type"}
    unknown = sorted(set(fields) - entry.fields)
    if unknown:
        raise DecodeError(f"{where}: {entry.name} has no field {', '.join(unknown)}")
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: take values as given
        hints = {}
    values = {
        name: _coerce(value, hints.get(name, Any), f"{where}.{name}")
        for name, value in fields.items()
    }
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.init
        and f.name not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise DecodeError(f"{where}: {entry.name} needs the field(s) {', '.join(missing)}")
    init = {k: v for k, v in values.items() if k in entry.init}
    try:
        built = cls(**init)
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"{where}: {entry.name}({exc})") from exc
    for name, value in values.items():
        if name not in entry.init:
            object.__setattr__(built, name, value)
    return built


def _kind(data: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(data), type(data).__name__)
