"""SQLiteStore's session leases: one row per session, changed in a write transaction.

A mixin of :class:`~._sqlite.SQLiteStore`, kept apart because it is one concern:
granting, renewing and releasing leases, and reading the live one. The fencing
step of a save is in ``SQLiteStore.save``, inside the save's own write
transaction (so no lease change can come between the check and the commit).
"""

from __future__ import annotations

import time

from . import _sqlite_sql as sql
from ._lease import Lease, LeaseRow, check_owner, check_ttl, grant, renewed
from ._sqlite_conn import SQLiteConnections

__all__ = ["SQLiteLeases"]


class SQLiteLeases(SQLiteConnections):
    """The lease methods of SQLiteStore, on its connections."""

    def acquire_lease(self, session: str, owner: str, ttl: float) -> Lease:
        """Take the session if no live lease holds it (see CheckpointStore.acquire_lease)."""
        ttl, owner = check_ttl(ttl), check_owner(owner)
        with self._write(durable=False) as db:
            row = grant(session, sql.lease_row(db, session), owner, ttl, time.time())
            sql.put_lease(db, session, row)
        return row.as_lease(session)

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend a current lease (see CheckpointStore.renew_lease)."""
        ttl = check_ttl(ttl)
        with self._write(durable=False) as db:
            row = renewed(sql.lease_row(db, lease.session), lease, ttl, time.time())
            sql.put_lease(db, lease.session, row)
        return row.as_lease(lease.session)

    def release_lease(self, lease: Lease) -> None:
        """End a current lease; a stale one is ignored (see CheckpointStore.release_lease)."""
        with self._write(durable=False) as db:
            row = sql.lease_row(db, lease.session)
            if row is not None and not row.released and row.token == lease.token:
                sql.put_lease(
                    db, lease.session, LeaseRow(row.token, row.owner, row.expires_at, True)
                )

    def current_lease(self, session: str) -> Lease | None:
        """The live lease of ``session``, or None."""
        with self._read() as db:
            row = sql.lease_row(db, session)
        return row.as_lease(session) if row is not None and row.live(time.time()) else None
