"""Reading a request's fields: each of the type and range the service takes, or an
:class:`~actorflow.errors.InvalidRequest` (422) naming the field and what to send.

A field that is absent or JSON ``null`` takes its default, as the LangGraph SDK sends
``null`` for every argument not given; anything else of the wrong shape is refused,
never coerced or passed on to fail later as a 500.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Mapping
from typing import Any

from actorflow.errors import InvalidRequest

__all__ = ["choice", "count", "json_object", "text", "texts", "thread_id"]

_MAX_ID = 256
"""The longest thread id taken (a session id the stores keep in an index)."""


def count(fields: Mapping[str, Any], name: str, default: int) -> int:
    """A non-negative whole number (from a JSON number, or a query string's digits)."""
    value = fields.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise InvalidRequest(f"{name} must be a whole number of 0 or more, not {value!r:.60}")


def choice(fields: Mapping[str, Any], name: str, allowed: Collection[str], default: str) -> str:
    """One of ``allowed``."""
    value = fields.get(name)
    if value is None:
        return default
    if isinstance(value, str) and value in allowed:
        return value
    raise InvalidRequest(f"{name} {value!r:.60} is not one of: {', '.join(allowed)}")


def text(fields: Mapping[str, Any], name: str) -> str | None:
    """A string, or None when absent."""
    value = fields.get(name)
    if value is None or isinstance(value, str):
        return value
    raise InvalidRequest(f"{name} must be a string, not {value!r:.60}")


def texts(fields: Mapping[str, Any], name: str) -> list[str] | None:
    """A list of strings, or None when absent."""
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise InvalidRequest(f"{name} must be a list of strings, not {value!r:.60}")


def json_object(fields: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A JSON object (empty when absent)."""
    value = fields.get(name)
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise InvalidRequest(f"{name} must be a JSON object, not {value!r:.60}")


def thread_id(value: object, name: str = "thread_id") -> str:
    """A thread id a client can address: a non-empty string of at most 256 characters,
    no ``/`` (a path segment), no control character (NUL ends a C string, a newline
    splits a header line) and nothing UTF-8 cannot carry (a lone surrogate)."""
    if not isinstance(value, str) or not value:
        raise InvalidRequest(
            f"{name} must be a non-empty string (a UUID, say), not {value!r:.60}; "
            "leave it out to have one made"
        )
    bad = [c for c in value if c == "/" or unicodedata.category(c) in ("Cc", "Cs")]
    if bad or len(value) > _MAX_ID:
        why = f"it holds {bad[0]!r}" if bad else f"it is {len(value)} characters long"
        raise InvalidRequest(
            f"{name} {value[:60]!r} cannot be a thread id: {why}; use at most {_MAX_ID} "
            "characters, without '/' or control characters (a UUID always works)"
        )
    return value
