"""A form for an answer whose type is a registered dataclass, and the value it makes.

A request names the type its answer must have (a label, such as ``app.Decision``).
When that label is a registered dataclass in this process, the page offers one input
per field: a checkbox for ``bool``, a number input for ``int`` and ``float``, a text
input for ``str``, a choice for a registered ``Enum``, a nested fieldset for a
dataclass field, and a JSON box for anything else (lists, maps, unions, optional
fields). What the form posts is turned back into JSON data here, then into the value
by ``actorflow.actors.from_json`` (only registered types are built), and then
validated by the session as any answer is.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from actorflow.actors import is_registered, to_json, type_named

__all__ = ["PREFIX", "Field", "answer_fields", "form_data"]

PREFIX = "field."
"""Form inputs of a field form are named ``field.<name>[.<nested name>...]``."""

MAX_DEPTH = 3
"""Nested dataclasses deeper than this are answered as JSON."""


@dataclass
class Field:
    """One input of an answer form."""

    name: str
    """The input's name (``field.note``, ``field.address.city``)."""
    label: str
    """The field's name, as shown."""
    widget: str
    """``checkbox``, ``int``, ``float``, ``text``, ``choice``, ``json`` or ``group``."""
    type_text: str
    """The field's annotation, as shown."""
    value: str = ""
    """The initial value (a default, as the input shows it)."""
    checked: bool = False
    options: list[str] = field(default_factory=list)
    """The members of a ``choice``."""
    children: list[Field] = field(default_factory=list)
    """The fields of a ``group``."""


def _type_text(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _field(name: str, label: str, tp: Any, default: Any, depth: int) -> Field:
    shown = _type_text(tp)
    given = default is not dataclasses.MISSING
    if tp is bool:
        return Field(name, label, "checkbox", shown, checked=bool(default) if given else False)
    if tp is int or tp is float:
        widget = "int" if tp is int else "float"
        return Field(name, label, widget, shown, value=str(default) if given else "")
    if tp is str:
        return Field(name, label, "text", shown, value=str(default) if given else "")
    if isinstance(tp, type) and issubclass(tp, enum.Enum) and is_registered(tp):
        members = [m.name for m in tp]
        first = default.name if given and isinstance(default, tp) else members[0]
        return Field(name, label, "choice", shown, value=first, options=members)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and depth < MAX_DEPTH:
        return Field(name, label, "group", shown, children=_fields_of(tp, name, depth + 1))
    value = json.dumps(to_json(default)) if given else ""
    return Field(name, label, "json", shown, value=value)


def _fields_of(cls: type, prefix: str, depth: int) -> list[Field]:
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: every field as JSON
        hints = {}
    return [
        _field(f"{prefix}.{f.name}", f.name, hints.get(f.name, Any), _default(f), depth)
        for f in dataclasses.fields(cls)
        if f.init
    ]


def answer_fields(response_type: str) -> list[Field] | None:
    """The inputs of a form for an answer of type ``response_type`` (a label), or None
    when it is not a registered dataclass of this process (the page then asks for JSON)."""
    cls = type_named(response_type)
    if cls is None or not dataclasses.is_dataclass(cls) or not is_registered(cls):
        return None
    return _fields_of(cls, PREFIX.rstrip("."), 0)


def _value(f: Field, form: Mapping[str, str]) -> Any:
    text = form.get(f.name, "")
    if f.widget == "checkbox":
        return f.name in form
    if f.widget == "group":
        return {child.label: _value(child, form) for child in f.children}
    if f.widget == "int":
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"{f.label}: {text!r} is not a whole number") from None
    if f.widget == "float":
        try:
            return float(text.strip())
        except ValueError:
            raise ValueError(f"{f.label}: {text!r} is not a number") from None
    if f.widget == "json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{f.label}: not JSON ({exc})") from None
    return text  # text, choice


def form_data(fields: list[Field], form: Mapping[str, str]) -> dict[str, Any]:
    """The JSON data a posted field form stands for (an object of the fields).

    Raises:
        ValueError: an input cannot be read as its field's kind (the message names it).
    """
    return {f.label: _value(f, form) for f in fields}
