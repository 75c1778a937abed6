"""SQLiteStore's session leases: one row per session, changed in a write transaction.

:class:`SQLiteLeases` owns one concern of :class:`~._store.SQLiteStore`, on the
store's connections: granting, renewing and releasing leases, and reading the live one. The fencing
step of a save is in ``SQLiteStore.save``, inside the save's own write
transaction (so no lease change can come between the check and the commit).
"""

from __future__ import annotations

import time
from pathlib import Path

from actorflow.storage._lease import (
    Lease,
    LeaseRow,
    cancel_noted,
    check_owner,
    check_run_id,
    check_ttl,
    grant,
    renewed,
)
from actorflow.storage._lock_wait import (
    check_lock_wait,
    describe_holders,
    lease_lock_held,
    lock_holders,
)

from . import _sql as sql
from ._connections import SQLiteConnections, WriteLockBusy

_WAL_WRITE_LOCK = 120
"""The offset in the ``-shm`` file of the lock a WAL writer holds (SQLite's file format)."""

__all__ = ["SQLiteLeases"]


class SQLiteLeases:
    """The session leases of one SQLite file, on the store's connections."""

    def __init__(self, connections: SQLiteConnections, path: Path) -> None:
        self._connections = connections
        self._path = path

    def acquire(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        """Take the session if no live lease holds it (see CheckpointStore.acquire_lease).

        A grant is a write transaction: it waits for the file's one write lock, which
        every save of every session takes. ``lock_wait`` bounds how long one holder may
        keep it (a line of this process's writers that keeps moving is waited out; see
        SQLiteConnections.write); None: the store's, ``BUSY_TIMEOUT_S``.
        """
        ttl, owner = check_ttl(ttl), check_owner(owner)
        wait = check_lock_wait(lock_wait)
        try:
            with self._connections.write(durable=False, wait=wait) as db:
                row = grant(session, sql.lease_row(db, session), owner, ttl, time.time())
                sql.put_lease(db, session, row)
            return row.as_lease(session)
        except WriteLockBusy as exc:
            if wait is None:
                raise
            busy, waited = exc, wait
        with self._connections.read() as db:  # WAL: a read needs no write lock
            held = sql.lease_row(db, session)
        raise lease_lock_held(
            session=session,
            where=f"the SQLite store {self._path}",
            lock=f"the write lock of {self._path} (byte 120 of {self._path}-shm)",
            waited=waited,
            holder=describe_holders(lock_holders(f"{self._path}-shm", start=_WAL_WRITE_LOCK)),
            row=held,
            now=time.time(),
        ) from busy

    def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a current lease (see CheckpointStore.renew_lease)."""
        ttl = check_ttl(ttl)
        with self._connections.write(durable=False) as db:
            row = renewed(sql.lease_row(db, lease.session), lease, ttl, time.time())
            sql.put_lease(db, lease.session, row)
            row = sql.with_cancel(db, lease.session, row)
        return row.as_lease(lease.session)

    def release(self, lease: Lease) -> None:
        """End a current lease; a stale one is ignored (see CheckpointStore.release_lease)."""
        with self._connections.write(durable=False) as db:
            row = sql.lease_row(db, lease.session)
            if row is not None and not row.released and row.token == lease.token:
                sql.put_lease(
                    db, lease.session, LeaseRow(row.token, row.owner, row.expires_at, True)
                )

    def current(self, session: str) -> Lease | None:
        """The live lease of ``session``, or None."""
        with self._connections.read() as db:
            row = sql.lease_row(db, session)
            if row is None or not row.live(time.time()):
                return None
            return sql.with_cancel(db, session, row).as_lease(session)

    def request_cancel(self, session: str, run_id: str) -> bool:
        """Note a cancel of ``run_id`` for the holder of ``session`` (see CancelRequests)."""
        run_id = check_run_id(run_id)
        with self._connections.write(durable=False) as db:
            noted = cancel_noted(sql.lease_row(db, session), run_id, time.time())
            if noted is not None:
                sql.put_cancel(db, session, noted)
        return noted is not None
