"""Optional fast paths a store may offer the runtime, as explicit protocols.

A store that implements only :class:`~._protocol.CheckpointStore` gets every record
through ``save`` and the strict write order (the next superstep starts once the
cut is durable). A store may offer more, by saying so in its class:

- :class:`SavesCuts`: it takes the supervisor's own records (:class:`~._cut.Cut`,
  a flat tuple) as they are, through ``save_cut``, instead of a
  :class:`~._format.Checkpoint` built for each one. It must store exactly what
  ``save(cut.checkpoint(), blobs, lease=lease)`` would: the conformance kit checks
  that reads after ``save_cut`` equal those after ``save``
  (``test_cut_fast_path_reads_as_save``).
- :class:`VolatileStore` with ``volatile = True``: nothing it holds outlives the
  process (a :class:`~._memory.MemoryStore`), so the runtime may write a ``step``
  cut while the next superstep starts (``Checkpointer.overlaps`` in the runtime),
  and does not move its writes off the supervisor's thread.
- :class:`SummarisesSessions`: it summarises every session at once
  (``session_summaries``), for tools that list sessions (the inspector), instead of
  one ``list(session=...)`` per session. It must answer exactly what
  :func:`~._summary.summaries_by_listing` answers for a healthy store: the kit checks
  it (``test_session_summaries_equal_the_listing``).

The first two are looked up once per lineage (:func:`cut_saver`, :func:`is_volatile`),
not per superstep; the third by :func:`session_summaries`, once per call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar, Protocol, runtime_checkable

from ._cut import Cut
from ._lease import Lease
from ._protocol import CheckpointStore
from ._summary import SessionSummary, summaries_by_listing

__all__ = [
    "CutSaver",
    "SavesCuts",
    "SummarisesSessions",
    "VolatileStore",
    "cut_saver",
    "is_volatile",
    "session_summaries",
    "takes_cuts",
]


@runtime_checkable
class SavesCuts(Protocol):
    """Optional fast path: a store that takes the runtime's :class:`~._cut.Cut` records.

    The runtime uses it only when the class that defines the store's ``save`` also
    defines ``save_cut``: a subclass or a wrapper that overrides ``save`` alone (to
    count, fail or forward saves) still sees every record through its own ``save``,
    since an inherited ``save_cut`` would bypass it.
    """

    def save_cut(self, cut: Cut, blobs: Mapping[str, bytes], lease: Lease | None = None) -> None:
        """Store ``cut`` and its new blobs: the semantics and the errors of
        ``CheckpointStore.save(cut.checkpoint(), blobs, lease=lease)``."""
        ...


@runtime_checkable
class VolatileStore(Protocol):
    """Optional declaration: ``volatile`` is True, on the store's class, when nothing
    the store holds outlives the process, so no crash can leave its records behind
    (see the module docstring). Only the class counts: a wrapper that forwards
    attributes to a volatile store is not one (what it adds may be durable)."""

    volatile: ClassVar[bool]


@runtime_checkable
class SummarisesSessions(Protocol):
    """Optional fast path: a store that summarises every session in one read."""

    def session_summaries(self) -> list[SessionSummary]:
        """Every session with at least one record, sorted by id: what
        :func:`~._summary.summaries_by_listing` gives, without decoding any record but
        each session's newest.

        Raises:
            CheckpointCorrupt: a session's newest record cannot be decoded (it is
                never skipped). Damage to older records need not be noticed.
        """
        ...


def session_summaries(store: CheckpointStore) -> list[SessionSummary]:
    """Every session of ``store`` summarised, sorted by id: through the store's
    :class:`SummarisesSessions` fast path when it offers one, else by listing each
    session (:func:`~._summary.summaries_by_listing`).

    Raises:
        CheckpointCorrupt: a record that the reading decodes cannot be decoded.
    """
    if isinstance(store, SummarisesSessions):
        return store.session_summaries()
    return summaries_by_listing(store)


CutSaver = Callable[[Cut, Mapping[str, bytes]], None]
"""Saves a cut and its new blobs, with the semantics of ``CheckpointStore.save``."""


def is_volatile(store: CheckpointStore) -> bool:
    """Whether ``store``'s class declares it volatile (:class:`VolatileStore`)."""
    return getattr(type(store), "volatile", False) is True


def takes_cuts(store: CheckpointStore) -> bool:
    """Whether the runtime hands ``store`` its cuts as they are (see :class:`SavesCuts`)."""
    if not isinstance(store, SavesCuts):
        return False
    owner = next((c for c in type(store).__mro__ if "save" in c.__dict__), None)
    return owner is not None and "save_cut" in owner.__dict__


def cut_saver(store: CheckpointStore, lease: Lease | None = None) -> CutSaver:
    """How to save cuts into ``store``: as they are if it takes them (:func:`takes_cuts`),
    else as checkpoints through its ``save``. Every save carries ``lease`` when given
    (the session's fencing token, see ``CheckpointStore.save``)."""
    if takes_cuts(store):
        assert isinstance(store, SavesCuts)  # checked by takes_cuts
        takes = store.save_cut
        if lease is None:
            return takes

        def save_cut(cut: Cut, blobs: Mapping[str, bytes]) -> None:
            takes(cut, blobs, lease)

        return save_cut

    if lease is None:

        def save(cut: Cut, blobs: Mapping[str, bytes]) -> None:
            store.save(cut.checkpoint(), blobs)

        return save

    def save_leased(cut: Cut, blobs: Mapping[str, bytes]) -> None:
        store.save(cut.checkpoint(), blobs, lease=lease)

    return save_leased
