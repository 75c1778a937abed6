"""What the built-in stores share: argument checks, errors, retention plans, the lineage walk.

Third-party stores need none of this; they implement the protocol however they like.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Container, Iterable, Mapping
from collections.abc import Set as AbstractSet

from actorflow.errors import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    StoreClosed,
    UnsupportedFormat,
)

from ._format import Checkpoint, CheckpointKind, blob_digest, decode_checkpoint
from ._history import HistoryEntry
from ._protocol import CheckpointStore


def decode_stored(checkpoint_id: str, record: bytes) -> Checkpoint:
    """Decode the record stored under ``checkpoint_id``; errors name the id.

    Raises:
        CheckpointCorrupt: the bytes are damaged, or hold another checkpoint's record.
        UnsupportedFormat: the record is intact but of a format this version cannot read.
    """
    try:
        checkpoint = decode_checkpoint(record)
    except CheckpointCorrupt as exc:
        raise CheckpointCorrupt(f"checkpoint {checkpoint_id}: {exc}") from exc
    except UnsupportedFormat as exc:
        raise UnsupportedFormat(f"checkpoint {checkpoint_id}: {exc}") from exc
    if checkpoint.id != checkpoint_id:
        raise CheckpointCorrupt(
            f"checkpoint {checkpoint_id!r}: the record stored under this id is"
            f" {checkpoint.id}; restore it from a backup, or delete {checkpoint_id!r}"
        )
    return checkpoint


def matching(
    workflow: str | None, session: str | None, kind: CheckpointKind | None = None
) -> Callable[[Checkpoint], bool]:
    """Whether a record matches a read's filters (those given).

    Raises:
        ValueError: ``kind`` is not a checkpoint kind.
    """
    wanted_kind = None if kind is None else CheckpointKind(kind)
    return lambda cp: (
        (workflow is None or cp.workflow == workflow)
        and (session is None or cp.session == session)
        and (wanted_kind is None or cp.kind is wanted_kind)
    )


def checked_blobs(
    checkpoint_id: str, blobs: Mapping[str, bytes], referenced: AbstractSet[str]
) -> dict[str, bytes]:
    """The blobs of a save that the record references (``referenced``: its
    ``blob_digests()``, which the caller needs too), each verified against its key.

    Every given blob is verified, referenced or not, so a caller's hashing bug is
    reported where it happens rather than when some later record needs the blob.

    Raises:
        CheckpointCorrupt: a blob does not hash to its key.
    """
    if not blobs:
        return {}  # the common case: a checkpoint whose state did not change
    kept: dict[str, bytes] = {}
    for digest, data in blobs.items():
        # bytes(...) copies a mutable buffer, so the caller cannot change it under us.
        owned = data if isinstance(data, bytes) else bytes(data)
        if blob_digest(owned) != digest:
            raise CheckpointCorrupt(
                f"refusing to save checkpoint {checkpoint_id}: blob given as {digest} "
                f"hashes to {blob_digest(owned)}"
            )
        if digest in referenced:
            kept[digest] = owned
    return kept


def dangling(checkpoint_id: str, missing: builtins.list[str]) -> CheckpointCorrupt:
    """The error for a save whose record references blobs nobody can provide."""
    return CheckpointCorrupt(
        f"refusing to save checkpoint {checkpoint_id}: it references blob(s) that are "
        f"neither given nor stored: {', '.join(sorted(missing))}"
    )


def already_stored(checkpoint_id: str) -> CheckpointError:
    """The error for saving an id twice."""
    return CheckpointError(
        f"checkpoint {checkpoint_id} is already stored; records are immutable, "
        "save a new one with new_checkpoint_id()"
    )


def not_found(checkpoint_id: str) -> CheckpointNotFound:
    """The error for an id that is not stored."""
    return CheckpointNotFound(
        f"no checkpoint {checkpoint_id!r} in this store; store.list(session=...) (or "
        "`actorflow checkpoints list STORE`) gives the ids it holds, store.latest(session=...) "
        "a session's newest"
    )


def store_closed(store: object) -> StoreClosed:
    """The error for a call on ``store`` (a store, or how to name one) after, or
    overtaken by, its ``close()``."""
    if isinstance(store, str):
        named = store
    else:
        custom = type(store).__repr__ is not object.__repr__
        named = repr(store) if custom else type(store).__name__
    return StoreClosed(
        f"{named} is closed: store.close() was called (maybe by another thread while this "
        "call ran), so the call did not run or was stopped, and it stored nothing unless a "
        "later read shows it; close a store only after the sessions using it, and open a "
        "new store on the same data to go on"
    )


def check_session_id(value: object, name: str = "the session id") -> None:
    """ValueError unless ``value`` is a non-empty string that can be stored as text
    (UTF-8): another value would be written as a record no store reads back as it
    was, or, where a store takes None for "every session", act on every session."""
    if isinstance(value, str) and value:
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ValueError(
                f"{name} {value!r} cannot be stored as text (it holds a lone surrogate, "
                "as a str decoded with errors='surrogateescape' may); decode the id "
                "properly, or pass another one"
            ) from None
        return
    fix = "; pass a string"
    if isinstance(value, int | float) and not isinstance(value, bool):
        fix = f"; pass {str(value)!r} if that is the id meant"
    raise ValueError(f"{name} must be a non-empty string, got {value!r}{fix}")


def check_checkpoint_id(value: object) -> None:
    """TypeError unless ``value`` is a string: ``load`` and ``delete`` take one
    checkpoint's id (a list of them would otherwise fail as each store's driver fails,
    or be looked up as a string). A string that is no stored id is not found."""
    if not isinstance(value, str):
        fix = "call it once for each id" if isinstance(value, list | tuple | set) else "pass a str"
        raise TypeError(
            f"one checkpoint id (a str) is needed, got {value!r:.80}; {fix} "
            "(ids are listed by store.list())"
        )


def check_keep(keep: int) -> None:
    """Raise ValueError unless ``keep`` is a non-negative int."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValueError(f"prune(keep=...) needs a non-negative int, got {keep!r}")


def prune_plan(records: Iterable[tuple[str, str, str | None]], keep: int) -> builtins.list[str]:
    """The ids ``prune(session, keep)`` deletes, oldest first.

    ``records`` are one session's ``(id, kind, parent_id)``. The newest ``keep``
    *cuts* (records of every kind but ``partial``) stay, and so do the partial
    records whose parent is a kept cut: a partial record (one executor's finished
    part of an unfinished superstep) means something only on top of its cut, and
    counting it as a checkpoint would let ``keep=1`` delete the very cut a crashed
    run resumes from.
    """
    ordered = sorted(records)
    cuts = [checkpoint_id for checkpoint_id, kind, _ in ordered if kind != "partial"]
    kept = set(cuts[len(cuts) - keep :]) if keep else set()
    return [
        checkpoint_id
        for checkpoint_id, kind, parent in ordered
        if checkpoint_id not in kept and not (kind == "partial" and parent in kept)
    ]


def check_cutoff(cutoff: float) -> float:
    """``cutoff`` as a float; ValueError unless it is a finite number (epoch seconds)."""
    if isinstance(cutoff, bool) or not isinstance(cutoff, int | float) or not math.isfinite(cutoff):
        raise ValueError(f"prune_older_than() needs finite epoch seconds, got {cutoff!r}")
    return float(cutoff)


AgedRecord = tuple[str, str, str, str | None, float]
"""``(id, session, kind, parent_id, created_at)`` of one stored record."""


def age_plan(
    records: Iterable[AgedRecord],
    cutoff: float,
    *,
    whole_sessions: bool,
    open_sessions: Container[str] = frozenset(),
) -> builtins.list[str]:
    """The ids ``prune_older_than(cutoff, whole_sessions=...)`` deletes, oldest first.

    Per session: with ``whole_sessions``, every record when the session's newest
    record was created before ``cutoff`` and the session is not one of
    ``open_sessions`` (those a live lease holds: an abandoned session goes whole,
    nothing of it otherwise). Without it, every cut created before ``cutoff`` except
    the session's newest cut, which a resume needs whatever its age; a partial record
    stays exactly when its parent cut does (as in :func:`prune_plan`).
    """
    sessions: dict[str, builtins.list[AgedRecord]] = {}
    for record in records:
        sessions.setdefault(record[1], []).append(record)
    doomed: builtins.list[str] = []
    for session, rows in sessions.items():
        rows.sort()
        if whole_sessions:
            if session not in open_sessions and max(row[4] for row in rows) < cutoff:
                doomed.extend(row[0] for row in rows)
            continue
        cuts = [row for row in rows if row[2] != "partial"]
        newest = cuts[-1][0] if cuts else None
        kept = {row[0] for row in cuts if row[4] >= cutoff or row[0] == newest}
        doomed.extend(
            checkpoint_id
            for checkpoint_id, _, kind, parent, _ in rows
            if checkpoint_id not in kept and not (kind == "partial" and parent in kept)
        )
    return sorted(doomed)


def idle_sessions(records: Iterable[AgedRecord], cutoff: float) -> builtins.set[str]:
    """The sessions of ``records`` whose newest record was created before ``cutoff``:
    those ``prune_older_than(cutoff, whole_sessions=True)`` deletes unless open."""
    newest: dict[str, float] = {}
    for _, session, _, _, created_at in records:
        newest[session] = max(created_at, newest.get(session, created_at))
    return {session for session, created_at in newest.items() if created_at < cutoff}


def lineage(store: CheckpointStore, checkpoint_id: str) -> builtins.list[Checkpoint]:
    """``store.history(checkpoint_id)`` from its ``load`` and ``latest``: this record and
    its stored ancestors, newest first (see ``CheckpointStore.history``).

    ``checkpoint_id`` may also be a session id: the lineage of its latest record.
    """
    try:
        head = store.load(checkpoint_id)
    except CheckpointNotFound:
        latest = store.latest(session=checkpoint_id)
        if latest is None:
            raise
        head = latest
    chain = [head]
    seen = {head.id}
    parent = chain[0].parent_id
    while parent is not None:
        if parent in seen:
            raise CheckpointCorrupt(f"checkpoint lineage loops back to {parent}")
        seen.add(parent)
        try:
            record = store.load(parent)
        except CheckpointNotFound:
            break  # deleted or pruned: the lineage is stored from here on only
        chain.append(record)
        parent = record.parent_id
    return chain


def session_history(records: Iterable[Checkpoint], since: int) -> builtins.list[HistoryEntry]:
    """The entries numbered ``since`` or more of a session's ``records``, ascending by
    seq (ties, which the runtime never writes, by record id)."""
    if not isinstance(since, int) or isinstance(since, bool):
        raise TypeError(f"since must be an int sequence number, not {type(since).__name__}")
    found = [entry for record in records for entry in record.history if entry.seq >= since]
    found.sort(key=lambda entry: (entry.seq, entry.checkpoint_id))
    return found
