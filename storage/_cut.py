"""The runtime's own checkpoint records, in the flat form it writes every superstep.

A supervisor writes a record at every barrier. Building a :class:`Checkpoint`
(twelve fields, two containers) and encoding it took ~5 us of CPU per barrier, a
third of a superstep of two executors in a cycle (W1). A :class:`Cut` is the same
record as one immutable tuple of plain values: strings, numbers, bytes and tuples
of them. Nothing in it can
change after it is made, so a store may keep it as it is and build the checkpoint
(or its bytes) only when somebody reads it: :class:`MemoryStore` does (it is a
``SavesCuts``, see ``_fast_paths``); every other store gets ``cut.checkpoint()``
through ``cut_saver``.

Internal: the runtime makes cuts, the built-in stores take them. The public record
is still :class:`Checkpoint`, and what a store hands back is always one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import msgpack

from ._format import Checkpoint, CheckpointKind, _plain_copy
from ._history import RawEntry, entries_of

__all__ = [
    "EMPTY_METADATA",
    "Cut",
    "ExecutorDigests",
    "metadata_with",
    "packed_metadata",
]

ExecutorDigests = tuple[tuple[str, tuple[str, ...]], ...]
"""``(executor id, its snapshot's chunk digests)`` pairs, in the record's order."""


class Cut(NamedTuple):
    """One checkpoint record as the runtime writes it (fields as in :class:`Checkpoint`).

    The runtime guarantees what ``Checkpoint._from_runtime`` trusts: digests are
    sha256 hex, ``runtime`` is bytes, ``kind`` a kind's value.
    """

    id: str
    parent_id: str | None
    session: str
    workflow: str
    graph_signature: str
    superstep: int
    kind: str
    """A :class:`CheckpointKind` value (a plain str keeps the cut untracked, see MemoryStore)."""
    created_at: float
    executors: ExecutorDigests
    runtime: bytes
    metadata: bytes
    """The run's metadata as a packed msgpack map (see :func:`packed_metadata`)."""
    history: tuple[RawEntry, ...] = ()
    """The session's history entries this cut carries, ascending by seq (see
    :attr:`Checkpoint.history`), each as ``(seq, kind, time, data)``."""

    def checkpoint(self) -> Checkpoint:
        """The record as a :class:`Checkpoint` whose containers are its own."""
        return Checkpoint._from_runtime(
            id=self.id,
            parent_id=self.parent_id,
            session=self.session,
            workflow=self.workflow,
            graph_signature=self.graph_signature,
            superstep=self.superstep,
            kind=CheckpointKind(self.kind),
            created_at=self.created_at,
            executors=dict(self.executors),
            runtime=self.runtime,
            metadata=msgpack.unpackb(self.metadata) if self.metadata != EMPTY_METADATA else {},
            history=entries_of(self.id, self.history) if self.history else (),
        )


EMPTY_METADATA = b"\x80"
"""An empty msgpack map: the metadata of most runs."""


def metadata_with(packed: bytes, key: str, value: Any) -> bytes:
    """Packed metadata ``packed`` with ``key`` set to ``value`` (a plain msgpack value).

    Raises:
        EncodeError: ``value`` is not plain msgpack.
    """
    current = msgpack.unpackb(packed, raw=False) if packed != EMPTY_METADATA else {}
    return packed_metadata({**current, key: value})


def packed_metadata(metadata: Mapping[str, Any]) -> bytes:
    """User metadata as a cut holds it: checked as plain msgpack, then packed.

    Raises:
        EncodeError: ``metadata`` holds something that is not plain msgpack (the
            error names the key path).
    """
    if not metadata:
        return EMPTY_METADATA
    packed: bytes = msgpack.packb(_plain_copy(metadata, "metadata"), use_bin_type=True)
    return packed
