"""RecordSealer: a checkpoint record as an EncryptedStore hands it to its inner store, and back.

What stays visible to the inner store (it needs it to index, filter, fence and
collect): the id, parent id, session, workflow, graph signature, superstep, kind,
creation time, executor ids, and each chunk's *inner* digest (the sha256 of its
sealed bytes); each history entry's seq and time. What is sealed: the ``runtime``
bytes, the metadata, the plaintext digests of the chunks (in the sealed
``runtime`` of the inner record, whose ``metadata`` is empty), and each history
entry's kind and data (its inner kind is ``"sealed"``).

The visible fields are the associated data of the sealed ``runtime``, so changing
any of them (or moving the sealed bytes to another record) fails its
authentication; a history entry is bound to its record id, seq and time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import msgpack

from actorflow.errors import CheckpointCorrupt, EncodeError
from actorflow.storage._format import Checkpoint, CheckpointKind
from actorflow.storage._history import HistoryEntry

from ._keyring import Keyring

__all__ = ["SEALED_KIND", "RecordSealer", "inner_pairs"]

SEALED_KIND = "sealed"
"""The kind every history entry has in the inner store (the real one is sealed)."""


def _reject_ext(code: int, data: bytes) -> NoReturn:
    raise ValueError(f"msgpack ext type {code} in a sealed record")


def _unpack(data: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, ext_hook=_reject_ext)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CheckpointCorrupt(f"{what} holds a malformed sealed payload: {exc}") from exc


def _record_aad(cp: Checkpoint, executors: Mapping[str, tuple[str, ...]]) -> bytes:
    """The visible fields of ``cp``'s inner record, whose chunks are at ``executors``."""
    aad: bytes = msgpack.packb(
        [
            "actorflow.record",
            cp.id,
            cp.parent_id,
            cp.session,
            cp.workflow,
            cp.graph_signature,
            cp.superstep,
            str(cp.kind),
            cp.created_at,
            sorted([e, "".join(ds)] for e, ds in executors.items()),
        ],
        use_bin_type=True,
    )
    return aad


def _entry_aad(checkpoint_id: str, seq: int, time: float) -> bytes:
    aad: bytes = msgpack.packb(["actorflow.history", checkpoint_id, seq, time])
    return aad


class RecordSealer:
    """Seals records for the inner store and opens what it hands back (see the module)."""

    def __init__(self, keyring: Keyring) -> None:
        self._keys = keyring

    def seal(self, cp: Checkpoint, inner_executors: dict[str, tuple[str, ...]]) -> Checkpoint:
        """The inner store's record of ``cp``, whose chunks the inner store keeps at
        ``inner_executors`` (executor -> inner digests, in ``cp``'s order)."""
        payload: bytes = msgpack.packb(
            [
                cp.runtime,
                msgpack.packb(cp.metadata, use_bin_type=True),
                {e: bytes.fromhex("".join(ds)) for e, ds in cp.executors.items()},
            ],
            use_bin_type=True,
        )
        return Checkpoint._from_runtime(
            id=cp.id,
            parent_id=cp.parent_id,
            session=cp.session,
            workflow=cp.workflow,
            graph_signature=cp.graph_signature,
            superstep=cp.superstep,
            kind=cp.kind,
            created_at=cp.created_at,
            executors=inner_executors,
            runtime=self._keys.seal(payload, _record_aad(cp, inner_executors)),
            metadata={},
            history=tuple(
                HistoryEntry(
                    e.seq,
                    SEALED_KIND,
                    e.time,
                    self._keys.seal(
                        msgpack.packb([e.kind, e.data], use_bin_type=True),
                        _entry_aad(cp.id, e.seq, e.time),
                    ),
                    cp.id,
                )
                for e in cp.history
            ),
        )

    def open(self, inner: Checkpoint) -> Checkpoint:
        """The caller's record from the inner store's ``inner``.

        Raises:
            CheckpointCorrupt: naming the record: not sealed, sealed by a key not
                held, tampered with (visible fields included), or malformed.
        """
        what = f"checkpoint {inner.id}"
        payload = _unpack(
            self._keys.open(inner.runtime, _record_aad(inner, inner.executors), what), what
        )
        try:
            runtime, metadata, digests = payload
            executors = {
                e: tuple(_hex_digests(digests[e], len(inner_digests)))
                for e, inner_digests in inner.executors.items()
            }
            if len(digests) != len(executors):
                raise ValueError("the sealed digests name other executors")
            return Checkpoint(
                id=inner.id,
                parent_id=inner.parent_id,
                session=inner.session,
                workflow=inner.workflow,
                graph_signature=inner.graph_signature,
                superstep=inner.superstep,
                kind=CheckpointKind(inner.kind),
                created_at=inner.created_at,
                executors=executors,
                runtime=runtime,
                metadata=_unpack(metadata, what),
                history=tuple(self.open_entry(e) for e in inner.history),
            )
        except (TypeError, ValueError, KeyError, EncodeError) as exc:
            raise CheckpointCorrupt(f"{what} has a malformed sealed field: {exc}") from exc

    def open_entry(self, entry: HistoryEntry) -> HistoryEntry:
        """The caller's history entry from the inner store's ``entry``.

        Raises:
            CheckpointCorrupt: the entry's sealed data does not open (as :meth:`open`).
        """
        what = f"history entry {entry.seq} of checkpoint {entry.checkpoint_id}"
        aad = _entry_aad(entry.checkpoint_id, entry.seq, entry.time)
        opened = _unpack(self._keys.open(entry.data, aad, what), what)
        if (
            entry.kind != SEALED_KIND
            or not isinstance(opened, list)
            or len(opened) != 2
            or not isinstance(opened[1], bytes)
        ):
            raise CheckpointCorrupt(f"{what} has a malformed sealed payload")
        kind, data = opened
        try:
            return HistoryEntry(entry.seq, kind, entry.time, data, entry.checkpoint_id)
        except (TypeError, ValueError) as exc:
            raise CheckpointCorrupt(f"{what} has a malformed sealed payload: {exc}") from exc


def _hex_digests(raw: object, count: int) -> list[str]:
    if not isinstance(raw, bytes) or len(raw) != 32 * count:
        raise ValueError("the sealed digests do not match the record's chunks")
    return [raw[i : i + 32].hex() for i in range(0, len(raw), 32)]


def inner_pairs(cp: Checkpoint, inner: Mapping[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    """``(plaintext digest, inner digest)`` for every chunk of ``cp`` kept at ``inner``."""
    return [(d, i) for e, ds in cp.executors.items() for d, i in zip(ds, inner[e], strict=True)]
