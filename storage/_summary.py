"""A session at a glance: its newest record, how many records it has, when it began
and when it last changed; and how to summarise every session of any store.

Tools that list sessions (the inspector's sessions page) need this for every session
of a store at once. The protocol can answer it only by listing each session
(:func:`summaries_by_listing`, which decodes every record); a store that can do better
offers :class:`~._fast_paths.SummarisesSessions` (the SQL stores: one query).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from ._format import Checkpoint
from ._protocol import CheckpointStore

__all__ = ["SessionSummary", "summaries_by_listing"]


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One session of a store, summarised."""

    session: str
    """The session id."""
    records: int
    """How many records the session has (cuts and partial records)."""
    first_at: float
    """The smallest ``created_at`` of its records (Unix seconds)."""
    last_at: float
    """The greatest ``created_at`` of its records (Unix seconds)."""
    latest: Checkpoint
    """Its newest record (the highest id, of any kind), freshly decoded."""


def summaries_by_listing(store: CheckpointStore) -> builtins.list[SessionSummary]:
    """Every session of ``store``, sorted by id, through the protocol alone: one
    ``list(session=...)`` per session, so every record is decoded.

    Raises:
        CheckpointCorrupt: a record cannot be decoded (as ``list`` raises).
    """
    found: builtins.list[SessionSummary] = []
    for session in store.sessions():
        records = store.list(session=session)
        if not records:  # deleted between the two reads
            continue
        times = [cp.created_at for cp in records]
        found.append(SessionSummary(session, len(records), min(times), max(times), records[-1]))
    return found
