"""MemoryStore: checkpoints held in this process, as bytes or as immutable runtime cuts."""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final, Self

from actorflow.errors import CheckpointCorrupt, CheckpointNotFound, UnsupportedFormat

from ._common import (
    age_plan,
    already_stored,
    check_checkpoint_id,
    check_cutoff,
    check_keep,
    check_session_id,
    checked_blobs,
    dangling,
    decode_stored,
    lineage,
    not_found,
    prune_plan,
    session_history,
    store_closed,
)
from ._cut import Cut, ExecutorDigests
from ._format import Checkpoint, CheckpointKind, encode_checkpoint, verify_blob
from ._history import HistoryEntry
from ._lease import (
    Lease,
    LeaseRow,
    cancel_noted,
    check_owner,
    check_run_id,
    check_ttl,
    fence,
    grant,
    leaseless_check,
    renewed,
)
from ._lock_wait import check_lock_wait, lease_lock_held

_Entry = tuple[bytes | tuple[Any, ...], str, str, str, str | None, tuple[str, ...], float]
"""A stored record and what the store indexes about it, taken at save time.

At :data:`_RECORD` the encoded record, or a runtime :class:`Cut`'s fields until
somebody reads it (then it is encoded once and the entry replaced: most cuts are
never read, a run reads back only the one it resumes from); then the session,
workflow, kind value, parent id, the digests of the blobs it references, and its
``created_at`` (for retention by age).

A plain tuple of strings, bytes and plain tuples of them, on purpose: CPython's
cycle collector stops tracking such a tuple once its collections have visited it
(one per level of nesting), so an index of many thousands of records costs
collections nothing. A named tuple, or a dict or frozenset anywhere inside, keeps
every record tracked, which cost 1-4 us per checkpoint in a long run. One dict holds records and index
both: a second dict keyed by id cost a save ~1 us more in a long run (one more
insert at a random place of a large table).
"""
_RECORD: Final = 0
_SESSION: Final = 1
_WORKFLOW: Final = 2
_KIND: Final = 3
_PARENT: Final = 4
_DIGESTS: Final = 5
_CREATED: Final = 6


class MemoryStore:
    """A checkpoint store in process memory, for tests, short-lived runs and restarts.

    Every read decodes bytes: records are encoded on :meth:`save` (the runtime's own
    cuts when first read), so nothing it returns aliases its internals or anything
    the caller passed in (the Microsoft Agent Framework #7683 failure cannot
    happen). Thread-safe: one lock guards every operation. Data lives as long as the
    object; another process cannot see it.
    """

    volatile: ClassVar[bool] = True
    """Its records end with the process (a ``VolatileStore``): the runtime may write a
    cut while the next superstep starts (see ``actorflow.storage._fast_paths``)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._index: dict[str, _Entry] = {}
        self._blobs: dict[str, bytes] = {}
        self._listings: dict[tuple[str, ...], int] = {}
        """Digest listing (an entry's digests) -> how many records hold it."""
        self._refs: dict[str, int] = {}
        """Digest -> how many distinct listings held by records name it."""
        self._deleted: set[str] = set()
        self._last_digests: tuple[Mapping[str, tuple[str, ...]], frozenset[str], tuple[str, ...]]
        self._last_digests = ({}, frozenset(), ())
        self._last_cut_digests: tuple[ExecutorDigests, frozenset[str], tuple[str, ...]]
        self._last_cut_digests = ((), frozenset(), ())
        self._leases: dict[str, LeaseRow] = {}
        """Session -> its lease row; kept after release so tokens are never reused."""
        self._closed = False

    def close(self) -> None:
        """End the store: its data is gone, and every later call raises StoreClosed. Idempotent."""
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise store_closed(self)

    def history(self, checkpoint_id: str) -> builtins.list[Checkpoint]:
        """This record and its stored ancestors, newest first (see CheckpointStore.history)."""
        return lineage(self, checkpoint_id)

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        """Store a record and its new blobs atomically (see CheckpointStore.save)."""
        record = encode_checkpoint(checkpoint)
        # Consecutive records of a lineage mostly name the same blobs: reuse the last
        # one's digests (and its index tuple, which then costs no memory).
        executors, digests, listed = self._last_digests
        if checkpoint.executors != executors:
            digests = checkpoint.blob_digests()
            listed = tuple(digests)  # in no order: verify() sorts them when it needs to
            self._last_digests = (dict(checkpoint.executors), digests, listed)
        given = checked_blobs(checkpoint.id, blobs, digests) if blobs else {}
        # str(): the kind's plain value, so the entry holds only str and bytes.
        entry: _Entry = (
            record,
            checkpoint.session,
            checkpoint.workflow,
            str(checkpoint.kind),
            checkpoint.parent_id,
            listed,
            checkpoint.created_at,
        )
        self._insert(checkpoint.id, entry, digests, given, lease)

    def save_cut(self, cut: Cut, blobs: Mapping[str, bytes], lease: Lease | None = None) -> None:
        """Store a runtime cut as it is; it is encoded when first read (``SavesCuts``).

        Keeping the cut as a tuple instead of building and encoding a Checkpoint
        per superstep is what W1 measures (~5 us of a superstep's CPU, see ``_cut``).

        The runtime hands over the same ``executors`` tuple while no snapshot changed,
        so an identity check finds the digests of the last cut.
        """
        executors, digests, listed = self._last_cut_digests
        if cut.executors is not executors:
            digests = frozenset(d for _, chunk_digests in cut.executors for d in chunk_digests)
            listed = tuple(digests)
            self._last_cut_digests = (cut.executors, digests, listed)
        given = checked_blobs(cut.id, blobs, digests) if blobs else {}
        # tuple(cut): a plain tuple, which the collector stops tracking (see _Entry).
        entry: _Entry = (
            tuple(cut),
            cut.session,
            cut.workflow,
            cut.kind,
            cut.parent_id,
            listed,
            cut.created_at,
        )
        self._insert(cut.id, entry, digests, given, lease)

    def _insert(
        self,
        checkpoint_id: str,
        entry: _Entry,
        digests: frozenset[str],
        given: dict[str, bytes],
        lease: Lease | None,
    ) -> None:
        # References are counted per listing: consecutive records of a lineage mostly
        # share one (the same tuple, see save), so a record costs one increment, and the
        # blobs of a listing some record holds are known to be stored.
        listed = entry[_DIGESTS]
        with self._lock:
            self._check_open()
            index, listings = self._index, self._listings
            # The fencing check, under the same lock as the insert (see CheckpointStore.save).
            row = self._leases.get(entry[_SESSION]) if self._leases else None
            if lease is not None:
                fence(row, lease, entry[_SESSION], checkpoint_id)
            elif row is not None:
                leaseless_check(row, entry[_SESSION], checkpoint_id, time.time())
            if checkpoint_id in index:
                raise already_stored(checkpoint_id)
            holders = listings.get(listed, 0)
            if not holders:
                stored, refs = self._blobs, self._refs
                missing = [d for d in digests if d not in given and d not in stored]
                if missing:
                    raise dangling(checkpoint_id, missing)
                for digest in listed:
                    if digest not in stored:
                        stored[digest] = given[digest]
                    refs[digest] = refs.get(digest, 0) + 1
            listings[listed] = holders + 1
            index[checkpoint_id] = entry

    # --- leases (see CheckpointStore.acquire_lease) --------------------------------

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        """Take the session if no live lease holds it (see CheckpointStore.acquire_lease).

        ``lock_wait`` bounds the wait for the store's lock (held by another thread's
        call for as long as that takes; a thread stalled inside one holds it longer).
        """
        ttl, owner = check_ttl(ttl), check_owner(owner)
        wait = check_lock_wait(lock_wait)
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            raise lease_lock_held(
                session=session,
                where=repr(self),
                lock="the MemoryStore's lock",
                waited=wait or 0.0,
                holder="another thread of this process",
                row=self._leases.get(session),  # a dict read: atomic in CPython
                now=time.time(),
            )
        try:
            self._check_open()
            row = grant(session, self._leases.get(session), owner, ttl, time.time())
            self._leases[session] = row
        finally:
            self._lock.release()
        return row.as_lease(session)

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend a current lease (see CheckpointStore.renew_lease)."""
        ttl = check_ttl(ttl)
        with self._lock:
            self._check_open()
            row = renewed(self._leases.get(lease.session), lease, ttl, time.time())
            self._leases[lease.session] = row
        return row.as_lease(lease.session)

    def release_lease(self, lease: Lease) -> None:
        """End a current lease; a stale one is ignored (see CheckpointStore.release_lease)."""
        with self._lock:
            self._check_open()
            row = self._leases.get(lease.session)
            if row is not None and not row.released and row.token == lease.token:
                self._leases[lease.session] = LeaseRow(row.token, row.owner, row.expires_at, True)

    def current_lease(self, session: str) -> Lease | None:
        """The live lease of ``session``, or None."""
        with self._lock:
            self._check_open()
            row = self._leases.get(session)
        return row.as_lease(session) if row is not None and row.live(time.time()) else None

    def request_cancel(self, session: str, run_id: str) -> bool:
        """Note a cancel of ``run_id`` for the holder of ``session`` (see CancelRequests)."""
        run_id = check_run_id(run_id)
        with self._lock:
            self._check_open()
            noted = cancel_noted(self._leases.get(session), run_id, time.time())
            if noted is not None:
                self._leases[session] = noted
        return noted is not None

    def load(self, checkpoint_id: str) -> Checkpoint:
        """The record with this id, freshly decoded (see CheckpointStore.load)."""
        check_checkpoint_id(checkpoint_id)
        with self._lock:
            self._check_open()
            record = self._record(checkpoint_id) if checkpoint_id in self._index else None
        if record is None:
            raise not_found(checkpoint_id)
        return decode_stored(checkpoint_id, record)

    def load_blob(self, digest: str) -> bytes:
        """The blob with this digest, verified (see CheckpointStore.load_blob)."""
        with self._lock:
            self._check_open()
            data = self._blobs.get(digest)
        if data is None:
            raise CheckpointNotFound(f"no blob {digest!r} in this store")
        return verify_blob(digest, data)

    def has_blobs(self, digests: Iterable[str]) -> set[str]:
        """The subset of ``digests`` that is stored."""
        with self._lock:
            self._check_open()
            return {d for d in digests if d in self._blobs}

    def list(
        self,
        *,
        workflow: str | None = None,
        session: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> builtins.list[Checkpoint]:
        """Matching records, oldest first (see CheckpointStore.list)."""
        wanted = None if kind is None else CheckpointKind(kind)  # ValueError, as every store
        with self._lock:
            self._check_open()
            ids = self._matching(workflow, session, wanted)
            records = [(i, self._record(i)) for i in ids]
        return [decode_stored(i, r) for i, r in records]

    def latest(
        self, *, workflow: str | None = None, session: str | None = None
    ) -> Checkpoint | None:
        """The newest matching record, or None; a corrupt one raises."""
        with self._lock:
            self._check_open()
            ids = self._matching(workflow, session, None)
            if not ids:
                return None
            record = self._record(ids[-1])
        return decode_stored(ids[-1], record)

    def session_history(self, session: str, *, since: int = 0) -> builtins.list[HistoryEntry]:
        """The session's history entries from ``since`` (see CheckpointStore.session_history)."""
        check_session_id(session, "session")
        return session_history(self.list(session=session), since)

    def sessions(self) -> builtins.list[str]:
        """Every session with a stored record, sorted."""
        with self._lock:
            self._check_open()
            return sorted({e[_SESSION] for e in self._index.values()})

    def delete(self, checkpoint_id: str) -> None:
        """Delete a record and collect the blobs nothing else references."""
        check_checkpoint_id(checkpoint_id)
        with self._lock:
            self._check_open()
            if checkpoint_id not in self._index:
                raise not_found(checkpoint_id)
            self._delete(checkpoint_id)

    def prune(self, session: str, keep: int) -> int:
        """Keep the newest ``keep`` cuts of ``session`` (see CheckpointStore.prune)."""
        check_session_id(session, "session")
        check_keep(keep)
        with self._lock:
            self._check_open()
            index = self._index
            doomed = prune_plan(
                (
                    (i, index[i][_KIND], index[i][_PARENT])
                    for i in self._matching(None, session, None)
                ),
                keep,
            )
            for checkpoint_id in doomed:
                self._delete(checkpoint_id)
            return len(doomed)

    def ids(self) -> builtins.list[str]:
        """Every stored checkpoint id, damaged records included, oldest first.

        Not part of the protocol: what ``actorflow checkpoints verify`` counts, and
        how it reaches the records that :meth:`list` cannot decode around.
        """
        with self._lock:
            self._check_open()
            return sorted(self._index)

    def prune_older_than(self, cutoff: float, *, whole_sessions: bool = False) -> int:
        """Remove records by age (see CheckpointStore.prune_older_than)."""
        limit = check_cutoff(cutoff)
        with self._lock:  # leases change under it too: none is granted meanwhile
            self._check_open()
            now = time.time()
            doomed = age_plan(
                (
                    (i, e[_SESSION], e[_KIND], e[_PARENT], e[_CREATED])
                    for i, e in self._index.items()
                ),
                limit,
                whole_sessions=whole_sessions,
                open_sessions={s for s, row in self._leases.items() if row.live(now)},
            )
            for checkpoint_id in doomed:
                self._delete(checkpoint_id)
            return len(doomed)

    def verify(self) -> builtins.list[str]:
        """Every problem found in the store, one line each; [] when healthy."""
        with self._lock:
            self._check_open()
            records = {i: self._record(i) for i in self._index}
            index = dict(self._index)
            blobs = dict(self._blobs)
            deleted = set(self._deleted)
        problems: builtins.list[str] = []
        states: dict[str, str] = {}
        for checkpoint_id in sorted(index):
            entry = index[checkpoint_id]
            try:
                decode_stored(checkpoint_id, records[checkpoint_id])
            except (CheckpointCorrupt, UnsupportedFormat) as exc:
                problems.append(str(exc))
            parent = entry[_PARENT]
            if parent is not None and parent not in index and parent not in deleted:
                problems.append(f"checkpoint {checkpoint_id}: parent {parent} was never stored")
            for digest in sorted(entry[_DIGESTS]):
                if digest not in states:
                    states[digest] = _blob_state(digest, blobs)
                state = states[digest]
                if state != "ok":
                    problems.append(f"checkpoint {checkpoint_id}: blob {digest} is {state}")
        return problems

    # --- internals (caller holds self._lock) ---------------------------------------

    def _matching(
        self, workflow: str | None, session: str | None, kind: CheckpointKind | None
    ) -> builtins.list[str]:
        return sorted(
            i
            for i, e in self._index.items()
            if (workflow is None or e[_WORKFLOW] == workflow)
            and (session is None or e[_SESSION] == session)
            and (kind is None or e[_KIND] == kind)
        )

    def _record(self, checkpoint_id: str) -> bytes:
        """The stored bytes of a record; a cut is encoded now, once (see _Entry)."""
        entry = self._index[checkpoint_id]
        record = entry[_RECORD]
        if isinstance(record, bytes):
            return record
        encoded = encode_checkpoint(Cut._make(record).checkpoint())
        self._index[checkpoint_id] = (encoded, *entry[1:])
        return encoded

    def _delete(self, checkpoint_id: str) -> None:
        entry = self._index.pop(checkpoint_id)
        self._deleted.add(checkpoint_id)
        listed = entry[_DIGESTS]
        holders = self._listings[listed] - 1
        if holders:
            self._listings[listed] = holders
            return
        del self._listings[listed]
        for digest in listed:
            left = self._refs[digest] - 1
            if left:
                self._refs[digest] = left
            else:
                del self._refs[digest]
                del self._blobs[digest]


def _blob_state(digest: str, blobs: dict[str, bytes]) -> str:
    data = blobs.get(digest)
    if data is None:
        return "missing"
    try:
        verify_blob(digest, data)
    except CheckpointCorrupt:
        return "corrupt"
    return "ok"
