"""History entries: the events a session keeps, as a store holds them and back.

A store sees an entry as ``(seq, kind, time, data)`` (see
:mod:`actorflow.storage._history`); ``data`` is a msgpack map of the event's other
fields, values still encoded (``bytes``) as the supervisor routes them. Reading an
entry back rebuilds the typed event, its values decoded by the safe decoder (only
registered types), so what a caller gets is its own.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import fields
from typing import Any, Final

import msgpack

import actorflow.runtime._events as ev
from actorflow.actors import decode
from actorflow.errors import CheckpointCorrupt
from actorflow.storage import CheckpointStore, HistoryEntry, RawEntry

__all__ = ["DURABLE", "KINDS", "event_of", "raw_entry", "read_entries", "run_going_on"]

KINDS: Final[dict[type[ev.Event], str]] = {
    ev.RunStartedEvent: "run_started",
    ev.OutputEvent: "output",
    ev.RequestEvent: "request",
    ev.RequestAnsweredEvent: "request_answered",
    ev.ExecutorFailedEvent: "executor_failed",
    ev.RunRestartedEvent: "run_restarted",
    ev.SuperstepRolledBackEvent: "superstep_rolled_back",
    ev.RunCompletedEvent: "run_completed",
    ev.RunFailedEvent: "run_failed",
    ev.RunCancelledEvent: "run_cancelled",
}
"""The events that are the session's history, and the kind a store keeps for each."""

DURABLE: Final = frozenset(KINDS)
"""The classes of :data:`KINDS`, for a quick membership test."""

_CLASSES: Final = {kind: cls for cls, kind in KINDS.items()}
_VALUES: Final = frozenset({"value", "input"})
"""Fields that hold a message value (encoded bytes in the supervisor, decoded for callers)."""
_SKIPPED: Final = frozenset({"time", "seq"})
"""Fields the entry itself carries."""
_FIELDS: Final = {
    cls: tuple(f.name for f in fields(cls) if f.name not in _SKIPPED) for cls in KINDS
}


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return bytes(value)  # a Payload becomes plain bytes
    if isinstance(value, tuple):
        return list(value)
    return value


def raw_entry(event: ev.Event) -> RawEntry:
    """``event`` (of a :data:`DURABLE` class, its ``seq`` set) as a store keeps it.

    Message values must still be encoded (the supervisor's events are).
    """
    assert event.seq is not None, "only numbered events are history"
    cls = type(event)
    data = {name: _plain(getattr(event, name)) for name in _FIELDS[cls]}
    packed: bytes = msgpack.packb(data, use_bin_type=True)
    return (event.seq, KINDS[cls], event.time, packed)


def event_of(entry: HistoryEntry, *, decode_value: Callable[[bytes], Any] = decode) -> ev.Event:
    """The typed event an entry records, its values decoded with ``decode_value``.

    Raises:
        CheckpointCorrupt: the entry is not one this runtime writes (an unknown kind,
            or data of the wrong shape).
        DecodeError: a value is not a registered type (from the default decoder).
    """
    cls = _CLASSES.get(entry.kind)
    if cls is None:
        raise CheckpointCorrupt(
            f"history entry {entry.seq} of checkpoint {entry.checkpoint_id} has the unknown "
            f"kind {entry.kind!r}; it was written by another actorflow version"
        )
    try:
        data = msgpack.unpackb(entry.data, raw=False, strict_map_key=True, ext_hook=_refuse)
        if type(data) is not dict or set(data) != set(_FIELDS[cls]):
            raise ValueError("its fields are not those of the event")
        values: dict[str, Any] = {}
        for name in _FIELDS[cls]:
            value = data[name]
            if name in _VALUES and value is not None:
                if type(value) is not bytes:
                    raise ValueError(f"{name} is not an encoded value")
                value = decode_value(value)
            elif name == "status":
                value = ev.RunStatus(value)
            elif type(value) is list:
                value = tuple(value)
            values[name] = value
        return cls(time=entry.time, seq=entry.seq, **values)
    except (ValueError, TypeError) as exc:
        raise CheckpointCorrupt(
            f"history entry {entry.seq} ({entry.kind}) of checkpoint {entry.checkpoint_id} is "
            f"malformed: {exc}"
        ) from exc


def _refuse(code: int, data: bytes) -> Any:
    raise ValueError(f"ext type {code} is not allowed in a history entry")


def read_entries(store: CheckpointStore, session: str, since: int = 0) -> list[HistoryEntry]:
    """The session's stored entries numbered ``since`` or more, ascending.

    A store written before ``session_history`` was part of the protocol is read
    through its records (the same entries, found by decoding them all).
    """
    reader = getattr(store, "session_history", None)
    if reader is not None:
        found: list[HistoryEntry] = reader(session, since=since)
        return found
    entries = [e for cp in store.list(session=session) for e in cp.history if e.seq >= since]
    entries.sort(key=lambda e: (e.seq, e.checkpoint_id))
    return entries


def run_going_on(store: CheckpointStore, session: str) -> str | None:
    """The id of ``session``'s run that its stored history shows started and not ended
    (what to name in a cancel request: ``CancelRequests``), or None.

    A run's start is stored with its first cut, so a run that has stored no cut yet is
    not found; nor is the end of one whose process died (its start is then the last).
    """
    run_id: str | None = None
    for entry in read_entries(store, session):
        if entry.kind == "run_started":  # its input stays encoded: no user types needed
            started = event_of(entry, decode_value=bytes)
            assert isinstance(started, ev.RunStartedEvent)
            run_id = started.run_id
        elif entry.kind in _RUN_ENDS:
            run_id = None
    return run_id


_RUN_ENDS: Final = frozenset({"run_completed", "run_failed", "run_cancelled"})
