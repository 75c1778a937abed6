"""Reading handler annotations: which message types a handler accepts.

A handler's message parameter may be annotated with a class, a union of classes,
``list[T]`` (the handler takes fan-in deliveries: one list of ``T``), or
``object`` / ``Any`` (a catch-all). Dispatch walks the value's MRO, so the most
specific handler wins and ``object`` comes last.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any

from actorflow.actors import stable_name, wire_name

__all__ = ["TypeSpec", "a_label", "parse_type_spec", "type_label"]


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """The message types one handler accepts.

    ``classes`` are matched against single messages; ``list_items`` (non-empty for a
    ``list[T]`` annotation) against every item of a fan-in delivery.
    """

    classes: tuple[type, ...]
    """Classes accepted as single messages (``object`` means any)."""
    list_items: tuple[type, ...]
    """Item classes accepted in a fan-in list (``object`` means any)."""

    def labels(self) -> list[str]:
        """Stable names of the accepted types, for signatures and messages."""
        single = [type_label(c) for c in self.classes]
        listed = [f"list[{type_label(c)}]" for c in self.list_items]
        return single + listed


def _flatten(annotation: Any) -> tuple[type, ...] | None:
    """The classes a plain or union annotation stands for; None if unsupported."""
    if annotation is Any:
        return (object,)
    if annotation is None or annotation is type(None):
        return (type(None),)
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        out: list[type] = []
        for arg in typing.get_args(annotation):
            flat = _flatten(arg)
            if flat is None:
                return None
            out.extend(flat)
        return tuple(out)
    if origin is not None:
        # A parameterised generic such as dict[str, int]: routing sees only the
        # runtime class, so accept the bare origin class.
        return (origin,) if isinstance(origin, type) else None
    if isinstance(annotation, type):
        return (annotation,)
    return None


def parse_type_spec(annotation: Any) -> TypeSpec | None:
    """Turn a handler's message annotation into a :class:`TypeSpec` (None if unusable)."""
    origin = typing.get_origin(annotation)
    if origin is list:
        args = typing.get_args(annotation)
        items = _flatten(args[0]) if args else (object,)
        if items is None:
            return None
        # A list[T] handler also takes a plain list value whose items are T.
        return TypeSpec(classes=(), list_items=items)
    flat = _flatten(annotation)
    if flat is None:
        return None
    return TypeSpec(classes=flat, list_items=())


def a_label(label: str) -> str:
    """``label`` with its indefinite article, as a message reads: "an Approval", "a str"."""
    return f"{'an' if label[:1].lower() in 'aeiou' else 'a'} {label}"


def type_label(tp: type) -> str:
    """A name for ``tp`` that is stable across processes: its wire name if registered."""
    name = wire_name(tp)
    if name is not None:
        return name
    if tp.__module__ == "builtins":
        return tp.__qualname__
    return stable_name(tp)
