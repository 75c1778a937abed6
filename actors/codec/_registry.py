"""The registry of wire types: the decoding allowlist behind ``@actorflow.message``.

Only classes registered here can be rebuilt from bytes. Registration happens at
import time, from any thread; lookups are lock-free dict reads.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from actorflow.errors import DecodeError, RegistrationError

from ._naming import stable_name

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One registered class and what the codec needs to rebuild it."""

    name: str
    """The wire name."""
    cls: type
    """The registered class."""
    order: tuple[str, ...]
    """Every dataclass field, in declaration order (empty for an Enum)."""
    fields: frozenset[str]
    """The same names, for membership tests."""
    init: frozenset[str]
    """The fields the constructor accepts (the others are set after construction)."""
    members: Mapping[str, Any] | None
    """An Enum's members by name (aliases included); None for a dataclass."""


_lock = threading.Lock()
_by_name: dict[str, Entry] = {}
_by_type: dict[type, Entry] = {}


def _unlock_after_fork() -> None:
    # A parent thread registering a type at the fork would hold the lock in the child.
    global _lock  # noqa: PLW0603 - the registry is the process's
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_unlock_after_fork)


def qualified_name(tp: type) -> str:
    """``module.QualName`` of a type (just the name for builtins), as errors show it;
    ``__main__`` is resolved to the module's import name (see ``_naming``)."""
    if tp.__module__ == "builtins":
        return tp.__qualname__
    return stable_name(tp)


@overload
def message(cls: type[T], *, name: str | None = None) -> type[T]: ...
@overload
def message(cls: None = None, *, name: str | None = None) -> Callable[[type[T]], type[T]]: ...
def message(
    cls: type[T] | None = None, *, name: str | None = None
) -> type[T] | Callable[[type[T]], type[T]]:
    """Register a dataclass or an Enum for the wire under a stable name.

    Use as ``@message`` or ``@message(name="orders.Order")``, written above
    ``@dataclass``. Registration is the decoding allowlist: bytes can only rebuild
    registered classes, and decoding never imports a module to find one.

    Args:
        cls: the class (when used without arguments).
        name: the wire name; defaults to ``cls.__qualname__`` (not the module path,
            so moving the class to another module keeps old bytes readable).

    Returns:
        The class, unchanged (or a decorator that registers and returns it).

    Raises:
        RegistrationError: ``cls`` is neither a dataclass nor an Enum; the name is
            taken by a different class (pass ``name=``); or the class is already
            registered under another name. A class with the same ``__module__`` and
            ``__qualname__`` as the holder of its name (a reloaded module, a class
            redefined in a test) silently replaces it.
    """

    def register(target: type[T]) -> type[T]:
        _register(target, name)
        return target

    return register if cls is None else register(cls)


def _register(cls: type, name: str | None) -> None:
    if not isinstance(cls, type):
        raise RegistrationError(f"@message applies to a class, got {cls!r}")
    if issubclass(cls, enum.Enum):
        order: tuple[str, ...] = ()
        init: frozenset[str] = frozenset()
        members: Mapping[str, Any] | None = cls.__members__
    elif dataclasses.is_dataclass(cls):
        order = tuple(f.name for f in dataclasses.fields(cls))
        init = frozenset(f.name for f in dataclasses.fields(cls) if f.init)
        members = None
    else:
        raise RegistrationError(
            f"{qualified_name(cls)} is not a dataclass: apply @dataclass first, that is,"
            " write @dataclass on the line below @message"
        )
    wire = cls.__qualname__ if name is None else name
    if not isinstance(wire, str) or not wire:
        raise RegistrationError(f"the wire name of {qualified_name(cls)} must be a non-empty str")
    entry = Entry(wire, cls, order, frozenset(order), init, members)
    with _lock:
        holder = _by_name.get(wire)
        if holder is not None and holder.cls is not cls:
            # The same class seen twice (a reloaded module, a script that is also
            # imported under its module name) replaces its earlier self.
            if stable_name(holder.cls) != stable_name(cls):
                raise RegistrationError(
                    f"wire name {wire!r} is already registered to {qualified_name(holder.cls)}:"
                    f" pass name=... to register {qualified_name(cls)} under a distinct name"
                )
            del _by_type[holder.cls]
        previous = _by_type.get(cls)
        if previous is not None and previous.name != wire:
            raise RegistrationError(
                f"{qualified_name(cls)} is already registered as {previous.name!r}:"
                " a class has exactly one wire name"
            )
        _by_name[wire] = entry
        _by_type[cls] = entry


def wire_name(tp: type) -> str | None:
    """Return the wire name ``tp`` is registered under, or None if it is not registered."""
    entry = _by_type.get(tp)
    return None if entry is None else entry.name


def is_registered(tp: type) -> bool:
    """Return whether ``tp`` was registered with :func:`message`."""
    return tp in _by_type


def has_registered_subclass(tp: type) -> bool:
    """Whether some registered class is a subclass of ``tp`` (so values of it can arrive)."""
    return any(issubclass(cls, tp) for cls in list(_by_type))


def registered() -> list[tuple[str, type]]:
    """Every (wire name, class) registered in this process (a snapshot)."""
    return [(entry.name, cls) for cls, entry in list(_by_type.items())]


def entry_for(tp: type) -> Entry | None:
    """The registration of exactly ``tp`` (never of a base class), or None."""
    return _by_type.get(tp)


def entry_named(name: object) -> Entry:
    """The registration holding wire name ``name``.

    Raises:
        DecodeError: ``name`` is not a str, or no class holds it in this process.
    """
    entry = _by_name.get(name) if type(name) is str else None
    if entry is None:
        if type(name) is not str:
            raise DecodeError("malformed registered-type payload: the wire name is not a str")
        raise DecodeError(_unknown_name(name))
    return entry


def _unknown_name(name: str) -> str:
    """Why no class holds wire name ``name``, and what to do: a name a person wrote (a
    service's ``"$type"``) is more often a registered class named another way than a
    module not imported, so a class known by that name is pointed to first."""
    entries = list(_by_name.values())
    for entry in entries:
        cls = entry.cls
        if name in (stable_name(cls), f"{cls.__module__}.{cls.__qualname__}", cls.__name__):
            return (
                f"no type is registered as {name!r}: {qualified_name(cls)} is registered "
                f"as {entry.name!r}; use that name"
            )
    close = difflib.get_close_matches(name, [entry.name for entry in entries], n=3)
    nearby = f" (registered names close to it: {', '.join(map(repr, close))})" if close else ""
    return (
        f"type {name!r} is not registered in this process{nearby}: import the module that"
        " defines it (decoding never imports code)"
    )
