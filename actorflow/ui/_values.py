"""Stored values as the page shows them: decoded by the safe decoder, as text.

Values are decoded only through the safe decoder (registered types only) and shown as
text, which the templates escape; what cannot be decoded becomes a note saying why,
never an exception that takes the page down.
"""

from __future__ import annotations

import pprint
from typing import Any

from actorflow.actors import decode
from actorflow.errors import ActorflowError
from actorflow.runtime import decode_runtime
from actorflow.storage import Checkpoint, CheckpointKind

__all__ = [
    "Note",
    "decode_runtime_safely",
    "decode_text",
    "decoded_or_note",
    "failure",
    "show",
    "show_state",
]


def show(value: Any) -> str:
    """A decoded value as readable text (the template escapes it)."""
    return pprint.pformat(value, width=88, sort_dicts=False)


def show_state(state: dict[str, Any]) -> str:
    """An executor's state as text: one ``name = value`` entry per attribute, so a diff
    names the attribute that changed."""
    return "\n".join(f"{name} = {show(value)}" for name, value in state.items())


def failure(exc: BaseException) -> str:
    """An exception as ``Type: message``."""
    return f"{type(exc).__name__}: {exc}"


class Note(str):
    """Shown as is by pprint (no quotes): a placeholder for what could not be decoded."""

    def __repr__(self) -> str:
        return str(self)


def decoded_or_note(payload: Any) -> Any:
    """``payload`` decoded if it is bytes this process can decode, else a :class:`Note`
    saying why; never raises (the ``decode_value`` of ``event_of`` for the page)."""
    if not isinstance(payload, bytes):
        return payload
    try:
        return decode(payload)
    except ActorflowError as exc:
        return Note(f"<cannot decode {len(payload)} bytes: {exc}>")


def decode_text(payload: Any) -> str:
    """A payload as text: decoded when this process knows its types, else why not."""
    if isinstance(payload, list):  # a fan-in delivery: one payload per source
        return show([decoded_or_note(p) for p in payload])
    return show(decoded_or_note(payload))


def decode_runtime_safely(cp: Checkpoint) -> tuple[dict[str, Any] | None, str]:
    """The runtime record of a cut, or None and why it cannot be read (a partial
    record has none)."""
    if cp.kind is CheckpointKind.PARTIAL:
        return None, ""
    try:
        return decode_runtime(cp.runtime), ""
    except Exception as exc:  # noqa: BLE001 - shown on the page
        return None, f"runtime record of {cp.id}: {failure(exc)}"
