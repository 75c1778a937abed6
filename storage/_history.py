"""A session's history as a store keeps it: numbered entries that travel inside cuts.

What a run did between its checkpoints (its input, outputs, failures, restarts,
rollbacks, requests and answers, how it ended) is a list of entries, each with a
per-session sequence number. An entry is stored *inside* the record of the cut it
belongs to (:attr:`Checkpoint.history <actorflow.storage.Checkpoint.history>`), so
it is written in the same atomic step as that cut: after any crash a store holds
the entries of exactly the cuts it holds, and retention removes them with their
records. Entries after the last cut of a crashed run are not stored; the resumed
run writes them again, with the same numbers.

To a store an entry is plain data: a number, a kind, a time and opaque bytes the
runtime owns (``data``). The runtime turns entries into typed events for users.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["HistoryEntry", "RawEntry", "entries_of", "raw_entries"]

RawEntry = tuple[int, str, float, bytes]
"""An entry as a record encodes it: ``(seq, kind, time, data)``."""


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One numbered thing that happened in a session (see the module docstring).

    Raises:
        TypeError: a field has the wrong type.
        ValueError: ``seq`` is negative, ``kind`` is empty or ``time`` is not finite.
    """

    seq: int
    """Per-session sequence number: entries of a session never share one, and a
    later entry has a greater one."""
    kind: str
    """What happened (``run_started``, ``output``, ``run_failed``, ...): the runtime's
    name, which a store keeps as it is."""
    time: float
    """Unix time in seconds."""
    data: bytes
    """What the runtime recorded about it, as opaque msgpack (values inside are
    encoded messages, decoded only by the runtime's safe decoder)."""
    checkpoint_id: str
    """The cut whose record holds the entry."""

    def __post_init__(self) -> None:
        if not isinstance(self.seq, int) or isinstance(self.seq, bool):
            raise TypeError("HistoryEntry.seq must be an int")
        if not 0 <= self.seq < 2**63:
            raise ValueError("HistoryEntry.seq must be in [0, 2**63)")
        if not isinstance(self.kind, str) or not isinstance(self.checkpoint_id, str):
            raise TypeError("HistoryEntry.kind and checkpoint_id must be str")
        if not self.kind:
            raise ValueError("HistoryEntry.kind must not be empty")
        if not isinstance(self.time, int | float) or isinstance(self.time, bool):
            raise TypeError("HistoryEntry.time must be a number (unix seconds)")
        if not math.isfinite(self.time):
            raise ValueError("HistoryEntry.time must be finite")
        if not isinstance(self.data, bytes | bytearray | memoryview):
            raise TypeError("HistoryEntry.data must be bytes")
        # A frozen dataclass normalises its own fields this way.
        object.__setattr__(self, "time", float(self.time))
        object.__setattr__(self, "data", bytes(self.data))

    def raw(self) -> RawEntry:
        """The entry as a record encodes it (its cut is the record itself)."""
        return (self.seq, self.kind, self.time, self.data)


def entries_of(checkpoint_id: str, raw: Iterable[Any]) -> tuple[HistoryEntry, ...]:
    """Entries of the record ``checkpoint_id`` from their encoded form (checked).

    Raises:
        TypeError, ValueError: an entry is not ``[seq, kind, time, data]`` of the right
            types (a decoder reports that as corruption).
    """
    entries: list[HistoryEntry] = []
    for item in raw:
        if not isinstance(item, list | tuple) or len(item) != 4:
            raise TypeError("a history entry must be [seq, kind, time, data]")
        seq, kind, at, data = item
        entries.append(HistoryEntry(seq, kind, at, data, checkpoint_id))
    return tuple(entries)


def raw_entries(entries: Iterable[HistoryEntry]) -> list[RawEntry]:
    """``entries`` as a record encodes them, in their order."""
    return [entry.raw() for entry in entries]
