"""The :class:`CheckpointStore` protocol: the contract every checkpoint backend keeps.

A store is bytes in, bytes out. The runtime hands it plain records and
content-addressed blobs; the store persists them atomically and hands back values
that are the caller's own. ``actorflow.storage.conformance`` checks every clause
below; a third-party backend that passes it can be used wherever a built-in one is.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

from ._format import Checkpoint, CheckpointKind
from ._history import HistoryEntry
from ._lease import Lease


@runtime_checkable
class CheckpointStore(Protocol):
    """Durable (or in-memory) storage for checkpoint records and their blobs.

    Ownership: a store never keeps a reference to an object it was given and never
    hands out one it keeps; every :class:`Checkpoint` it returns is freshly decoded
    and belongs to the caller. Corrupt data is never skipped and never returned:
    it raises :class:`~actorflow.errors.CheckpointCorrupt`.

    Retention: a blob is deleted only when no stored checkpoint (of any session)
    references it. Deleting a checkpoint that is the parent of a kept one is
    allowed; the kept one's :meth:`history` then stops at it, and :meth:`verify`
    does not report that parent as missing (stores remember deleted ids).

    Ownership of a session: :meth:`acquire_lease` grants one owner at a time a
    :class:`~actorflow.storage.Lease` whose fencing token every save of that owner
    carries; the store checks the token in the same atomic step as the write, so two
    holders can never both extend a lineage. Leases expire by the store's clock
    (the local wall clock for the built-in stores) unless renewed. An unreleased
    lease is live while ``now < expires_at <= now + MAX_TTL``
    (:func:`actorflow.storage._lease.live`): an expiry no grant can make (``NaN``,
    an infinity, one further off than the longest ttl) is a damaged row, and every
    check of the store (grant, ``current_lease``, a save without a lease) counts it
    as expired alike.

    Sharing: a store handle is safe to share. One store object serves any number of
    sessions at once, from threads and asyncio tasks; processes open one handle each.
    :meth:`close` while calls are in flight never crashes the process (see there).

    Every method may raise :class:`~actorflow.errors.CheckpointError` for a failure of
    the medium (disk full, database unavailable), and
    :class:`~actorflow.errors.StoreClosed` when used after (or overtaken by) :meth:`close`.
    """

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        """Store a record and the blobs it references, atomically.

        Either the record and every new blob are stored, or nothing is. Blobs
        already stored are not written again (content addressing shares them across
        checkpoints, sessions and forks); blobs the record does not reference are
        checked but not stored.

        Fencing: with a ``lease``, atomically with the write, the session's current
        token must equal ``lease.token`` (and ``lease.session`` must be the record's
        session), else nothing is written. Without a lease the save is refused while
        the session has a live lease, and allowed otherwise (tools, tests, migrations).

        Args:
            checkpoint: the record; the store keeps its encoding, not the object.
            blobs: digest -> bytes for blobs that may not be stored yet.
            lease: the writer's lease of ``checkpoint.session``, if it holds one.

        Raises:
            CheckpointCorrupt: a blob does not hash to its key, or the record
                references a digest that is neither in ``blobs`` nor stored (a
                store never saves what it could not load).
            CheckpointError: a checkpoint with this id is already stored.
            LeaseLost: ``lease`` is not the session's current lease.
            SessionOwned: no ``lease`` was given and a live lease holds the session.
        """
        ...

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        """Take the session: a new lease with a new, greater token.

        Granted if the session has no lease, or its lease expired or was released.
        Each call is its own owner: the same ``owner`` string holding a live lease
        is refused like anybody else.

        Why ``lock_wait``: a grant must be ordered against the saves of the session
        (the fencing check and a save's commit are one step), so it takes a lock those
        saves hold: a file lock, a database's write lock, an advisory lock. A save
        holds it for milliseconds, but a process stopped inside one (``SIGSTOP``, a
        debugger, a frozen VM) holds it until it goes on, and only the store knows how
        to wait for its own lock with a bound. The runtime passes what is left of the
        opener's ``wait=`` (at least a short floor), so ``wf.resume(..., wait=3)``
        returns within about 3 s whatever holds the lock. A store written before this
        parameter is still called without it (the runtime checks the signature), and
        ``wait=`` then cannot bound its locks.

        Args:
            session: the session id.
            owner: who asks, for humans (process, host, worker name).
            ttl: seconds until the lease expires unless renewed.
            lock_wait: the longest this call may wait for the store's locks, in
                seconds; ``None``: the store's own bound (which may be long, or none).

        Raises:
            SessionOwned: a live lease holds the session (``holder`` names it), also
                when the lock stayed held past ``lock_wait`` while a live lease holds it.
            StoreLocked: the lock stayed held past ``lock_wait`` and no live lease
                holds the session; the message names the lock and, where the store
                can tell, who holds it.
            ValueError: ``ttl`` is not > 0 (or is above ``MAX_TTL``, 1e9 s),
                ``owner`` is empty, or ``lock_wait`` is negative.
        """
        ...

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend ``lease`` to ``ttl`` seconds from now; returns the extended lease.

        Works while its token is current, also past ``expires_at`` if nobody took over.

        Raises:
            LeaseLost: the token is no longer current (taken over or released).
            ValueError: ``ttl`` is not > 0.
        """
        ...

    def release_lease(self, lease: Lease) -> None:
        """End ``lease`` if its token is current. Idempotent; never raises for a stale lease."""
        ...

    def current_lease(self, session: str) -> Lease | None:
        """The live (unexpired, unreleased) lease of ``session``, or ``None``."""
        ...

    def load(self, checkpoint_id: str) -> Checkpoint:
        """The stored record with this id, freshly decoded.

        Raises:
            CheckpointNotFound: no such record.
            CheckpointCorrupt: the stored bytes fail their integrity check.
            UnsupportedFormat: the record was written in a newer format.
        """
        ...

    def load_blob(self, digest: str) -> bytes:
        """The blob with this digest, verified against it.

        Raises:
            CheckpointNotFound: no such blob.
            CheckpointCorrupt: the stored bytes do not hash to ``digest``.
        """
        ...

    def has_blobs(self, digests: Iterable[str]) -> set[str]:
        """The subset of ``digests`` that is stored (content is not verified)."""
        ...

    def list(
        self,
        *,
        workflow: str | None = None,
        session: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> builtins.list[Checkpoint]:
        """Records matching every given filter, oldest first (ascending id).

        Raises:
            CheckpointCorrupt: a record that may match cannot be decoded; it is
                never skipped.
        """
        ...

    def latest(
        self, *, workflow: str | None = None, session: str | None = None
    ) -> Checkpoint | None:
        """The newest matching record (highest id), or ``None`` if none matches.

        Raises:
            CheckpointCorrupt: the newest matching record cannot be decoded. It is
                not skipped in favour of an older one: resuming from a state older
                than the caller believes is a silent rollback.
        """
        ...

    def history(self, checkpoint_id: str) -> builtins.list[Checkpoint]:
        """This record and its stored ancestors via ``parent_id``, newest first.

        ``checkpoint_id`` may also be a session id (no record has that id): then the
        lineage of the session's latest record. The walk stops at the first parent
        that is not stored (deleted by :meth:`delete` or :meth:`prune`, or never saved).

        Raises:
            CheckpointNotFound: ``checkpoint_id`` is neither a stored record nor a session.
            CheckpointCorrupt: a record on the way cannot be decoded.
        """
        ...

    def session_history(self, session: str, *, since: int = 0) -> builtins.list[HistoryEntry]:
        """The session's history entries numbered ``since`` or more, ascending by ``seq``.

        The entries of every stored record of the session (each record holds its own,
        see :attr:`Checkpoint.history`), whatever its lineage: a session's history
        covers its resets and forks within it. Entries go with their records: a
        record removed by :meth:`delete` or retention takes its entries along, and a
        save that did not happen left none.

        Raises:
            CheckpointCorrupt: a record of the session cannot be decoded; it is never
                skipped (a consumer would silently miss what it holds).
        """
        ...

    def sessions(self) -> builtins.list[str]:
        """Every session with at least one stored record, sorted."""
        ...

    def delete(self, checkpoint_id: str) -> None:
        """Delete one record (corrupt or not) and collect blobs nothing references.

        Raises:
            CheckpointNotFound: no such record.
        """
        ...

    def prune(self, session: str, keep: int) -> int:
        """Keep the newest ``keep`` cuts of ``session``, delete the rest.

        A cut is a record of any kind but ``partial``. Partial records (one
        executor's finished part of a superstep whose barrier was not reached) do
        not count: one is kept exactly when its parent cut is, since it means
        nothing without it. Blobs are collected only when no remaining record of
        any session uses them.

        Returns:
            How many records were deleted.

        Raises:
            ValueError: ``keep`` is negative.
        """
        ...

    def prune_older_than(self, cutoff: float, *, whole_sessions: bool = False) -> int:
        """Remove records by age: retention for stores shared by many sessions.

        By default, every cut created before ``cutoff`` is deleted except each
        session's newest cut (what a resume needs, whatever its age); a partial
        record stays exactly when its parent cut does, as in :meth:`prune`. With
        ``whole_sessions``, every record of each session whose newest record was
        created before ``cutoff`` and that no live lease holds (a session open in
        some process is in use, however long it wrote nothing) is deleted, and
        nothing of the other sessions; no lease of a session being deleted is
        granted until it is gone, so an open finds it whole or not at all. Age is
        the record's ``created_at``. Blobs are collected only when no remaining
        record of any session uses them.

        Args:
            cutoff: epoch seconds; records created at or after it are kept.
            whole_sessions: drop abandoned sessions whole instead of thinning each.

        Returns:
            How many records were deleted.

        Raises:
            ValueError: ``cutoff`` is not a finite number.
            CheckpointCorrupt: a store that must decode records to learn their
                session or age (FileStore) found one it cannot decode; nothing was
                deleted.
        """
        ...

    def verify(self) -> builtins.list[str]:
        """Check everything stored; one human-readable line per problem, ``[]`` if healthy.

        Problems: a record that cannot be decoded; a referenced blob that is missing
        or does not match its digest; a ``parent_id`` that was never stored (a
        parent removed by :meth:`delete` or :meth:`prune` is not a problem).
        """
        ...

    def close(self) -> None:
        """Release resources. Idempotent; every call made afterwards raises StoreClosed.

        Safe while other threads' calls are in flight: it never crashes the process
        and never waits long for them (the built-in stores: a few seconds at most).
        Each call in flight finishes, or raises :class:`~actorflow.errors.StoreClosed`
        (having stored nothing unless a later read shows it).
        """
        ...


@runtime_checkable
class BlobBatchReader(Protocol):
    """Optional fast path a store may offer: many blobs in one round trip.

    Restoring a session needs every chunk of every executor's snapshot; a store
    whose per-call cost is high (a transaction, a network hop) should offer this.
    The runtime falls back to :meth:`CheckpointStore.load_blob` otherwise.
    """

    def load_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Every requested blob, verified against its digest (the caller's own bytes).

        Raises:
            CheckpointNotFound: one of them is not stored.
            CheckpointCorrupt: one of them does not match its digest.
        """


@runtime_checkable
class CancelRequests(Protocol):
    """Optional: cancel requests carried through the store to a session's holder.

    Processes that share a store (the workers of a service) each run the sessions
    whose leases they hold; only the holder can stop a run. Another process asks it
    through the store: :meth:`request_cancel` notes the run on the session's live
    lease, where the holder reads it (``current_lease(session).cancel_requested``,
    also on the lease ``renew_lease`` returns) and cancels the run if it is the one
    going on. Every built-in store offers it.

    >>> import actorflow as af
    >>> store = af.MemoryStore()
    >>> lease = store.acquire_lease("order-7", "worker 1", ttl=30)
    >>> store.request_cancel("order-7", "run-42")  # from any process sharing the store
    True
    >>> store.current_lease("order-7").cancel_requested  # what the holder sees
    'run-42'
    >>> store.request_cancel("order-8", "run-43")  # nobody holds it: nothing runs it
    False
    """

    def request_cancel(self, session: str, run_id: str) -> bool:
        """Ask the holder of ``session``'s live lease to cancel run ``run_id``.

        Returns whether a live lease held the session: False means no one holds it,
        so nothing runs it, and nothing is noted. A later request replaces an earlier
        one; a new grant starts without one. The note changes neither the lease's
        token nor its expiry, and no save is refused for it: the holder decides.

        Raises:
            ValueError: ``run_id`` is not a non-empty str.
        """
        ...
