"""PostgresStore's session leases: one row per leased session, fenced inside each save.

Time is the server's (``now()``, as epoch seconds), so hosts with skewed clocks
agree on when a lease expires. A transaction-level advisory lock per session
orders lease changes against saves: ``acquire``/``renew``/``release`` hold it
exclusively, a save holds it shared from its fencing check to its commit, so no
lease can change hands between a save's check and its commit, and saves of one
session never wait for each other.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from actorflow.errors import CheckpointError
from actorflow.storage._lease import (
    MAX_TTL,
    Lease,
    LeaseRow,
    check_owner,
    check_run_id,
    check_ttl,
    grant,
    renewed,
)
from actorflow.storage._lock_wait import check_lock_wait, lease_lock_held

from ._pool import PostgresConnections
from ._sql import Statements

T = TypeVar("T")
Conn = psycopg.Connection[Any]

LEASE_ROW = (
    "SELECT date_part('epoch', now()), l.token, l.owner, l.expires_at, l.released, NULL"
    " FROM (SELECT 1) AS one LEFT JOIN {s}.leases AS l ON l.session = %s"
)
"""The server's time and the session's lease row (NULLs when it has none): one row,
its last column the run a cancel was requested of (here none: a schema without
:data:`~._sql.CANCELS`; see :data:`LEASE_ROW_CANCEL`).

Times are ``date_part('epoch', ...)``, a float8 like ``expires_at``: ``extract``
returns numeric, whose functions a new connection's server process loads on first
use (~0.4 ms of a first resume)."""

LEASE_ROW_CANCEL = (
    LEASE_ROW.replace(", NULL FROM", ", c.run FROM")
    + " LEFT JOIN {s}.cancels AS c ON c.session = l.session AND c.token = l.token"
)
""":data:`LEASE_ROW` with the run a cancel was requested of while this lease held."""

LIVE = f"(expires_at > {{now}} AND expires_at <= {{now}} + {MAX_TTL:.0f})"
"""An unreleased lease holds: the SQL form of ``_lease.live`` (``{now}``: the server's
clock as epoch seconds). ``NaN`` is above every number here, so the second
comparison is what makes a ``NaN`` expiry expired, as in Python."""

GRANT = (
    "INSERT INTO {s}.leases AS l (session, token, owner, expires_at, released)"
    " SELECT %s::text, 1, %s::text, g.now + %s::float8, false FROM"
    " (SELECT pg_advisory_xact_lock(%s::bigint), date_part('epoch', now()) AS now) AS g"
    " ON CONFLICT (session) DO UPDATE SET token = l.token + 1,"
    " owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, released = false"
    " WHERE l.released OR NOT "
    + LIVE.replace("expires_at", "l.expires_at").replace("{now}", "date_part('epoch', now())")
    + " RETURNING l.token, l.expires_at"
)
"""``grant`` (see ``_lease``) on the server, in one statement (its own transaction):
the session's lock, then a new lease unless a live one (unreleased, unexpired by the
server's clock: :data:`LIVE`) holds the session; then it returns no row. ``ON CONFLICT DO
UPDATE`` decides on the row's latest version, under its row lock.

The token is the row's last one + 1 (1 for a session's first lease). The grant
commits durably, like every lease change: a token handed out is never handed out
again, whatever the server's clock does after a crash.
"""


CANCEL = (
    "INSERT INTO {s}.cancels AS c (session, token, run) SELECT l.session, l.token, %s::text"
    " FROM {s}.leases AS l WHERE l.session = %s::text AND NOT l.released AND "
    + LIVE.replace("expires_at", "l.expires_at").replace("{now}", "date_part('epoch', now())")
    + " ON CONFLICT (session) DO UPDATE SET token = EXCLUDED.token, run = EXCLUDED.run"
    " RETURNING 1"
)
"""``request_cancel`` in one statement: the run noted with the token of the session's
live lease; no row when none holds it. A grant committing meanwhile leaves the note on
the token it replaced: the request was of the run its holder ran."""


ROWS_FOR = (
    "INSERT INTO {s}.leases (session, token, owner, expires_at, released)"
    " SELECT unnest(%s::text[]), 0, '', 0, true ON CONFLICT (session) DO NOTHING"
    " RETURNING session"
)
"""Give each of these sessions a lease row if it has none (released, token 0), and
return those it gave one. Until the caller's transaction ends, a grant of one of them
waits for it: its upsert meets a row of a transaction still in progress. Deleting
them before that transaction commits leaves the table as it was, and the waiting
grant then inserts its row as if none had been there (PostgreSQL checks a unique key
again once the transaction it waited for has ended)."""

OPEN_AMONG = (
    "SELECT l.session FROM (SELECT session, expires_at, released FROM {s}.leases"
    " WHERE session = ANY(%s) FOR SHARE) AS l WHERE NOT l.released AND "
    + LIVE.replace("expires_at", "l.expires_at").replace("{now}", "date_part('epoch', now())")
)
"""Which of these sessions a live lease holds, each lease row locked (``FOR SHARE``)
until the caller's transaction ends, live or not: a grant's ``ON CONFLICT DO UPDATE``
waits for that lock. With :data:`ROWS_FOR` first (every session then has a row), no
session among them is opened meanwhile: what retention deleting idle sessions whole
needs (``prune_older_than``)."""

ROWS_GONE = "DELETE FROM {s}.leases WHERE session = ANY(%s) AND token = 0"
"""Take back the rows :data:`ROWS_FOR` gave (no grant can have changed them: it waits)."""


GRANT_WITHIN = (
    "WITH g AS MATERIALIZED (SELECT pg_try_advisory_xact_lock(%s::bigint) AS locked,"
    " date_part('epoch', now()) AS now), granted AS ("
    + GRANT[: GRANT.index(" FROM (SELECT pg_advisory_xact_lock")]
    + " FROM g WHERE g.locked"
    + GRANT[GRANT.index(" ON CONFLICT") :]
    + ") SELECT g.locked, granted.token, granted.expires_at FROM g LEFT JOIN granted ON true"
)
""":data:`GRANT` that does not wait for the session's lock: it returns whether it took
it, and the new lease's token and expiry if it granted one. ``acquire_lease`` with a
``lock_wait`` polls it until its bound (an advisory lock has no wait bound of its own
but ``lock_timeout``, which would take a transaction and a second round trip)."""

LOCK_HOLDERS = (
    "SELECT l.pid, a.client_addr, a.client_port, a.application_name, a.state,"
    " date_part('epoch', now() - a.xact_start) FROM pg_locks AS l"
    " LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()"
    " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    " AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid AND l.objsubid = 1"
)
"""The server processes holding a session's advisory lock (a single bigint key is
``classid`` = its high 32 bits, ``objid`` = its low 32 bits, ``objsubid`` = 1)."""

FENCED = (
    "EXISTS (SELECT FROM {s}.leases WHERE session = %s::text AND token = %s::bigint"
    " AND NOT released)"
)
"""A save with a lease may commit: its token is the session's current one (the SQL
form of ``_lease.current``; parameters: session, token). The caller checks first that
the lease is of the session saved."""

UNLEASED = (
    "NOT EXISTS (SELECT FROM {s}.leases WHERE session = %s::text AND NOT released AND "
    + LIVE.replace("{now}", "date_part('epoch', now())")
    + ")"
)
"""A save without a lease may commit: no live lease holds the session (the SQL form
of ``LeaseRow.live``; parameter: session)."""


def session_key(schema: str, session: str) -> int:
    """The session's advisory lock key: a signed 64-bit hash of schema and session.

    Single-key advisory locks live apart from the two-key ones the store uses for
    its data lock (PostgreSQL keeps the two key spaces separate); a collision of two
    sessions only makes them wait for each other.
    """
    digest = hashlib.blake2b(f"{schema}\0{session}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def read_lease(db: Conn, query: str, session: str) -> tuple[LeaseRow | None, float]:
    """The session's lease row (or None) and the server's clock, in epoch seconds."""
    found = db.execute(query, (session,)).fetchone()
    assert found is not None  # the query always returns one row
    return lease_of(found)


def lease_of(found: tuple[Any, ...]) -> tuple[LeaseRow | None, float]:
    now, token, owner, expires_at, released, cancel = found
    if token is None:
        return None, float(now)
    row = LeaseRow(int(token), str(owner), float(expires_at), bool(released), cancel)
    return row, float(now)


class PostgresLeases:
    """The session leases of one PostgresStore schema, on the store's connections."""

    def __init__(self, connections: PostgresConnections, q: Statements, *, cancels: bool) -> None:
        self._sql = q
        self._run = connections.run
        self._cancels = cancels
        """Whether the schema holds :data:`~._sql.CANCELS` (see ``_schema.open_schema``)."""
        self._q_lease_row = q(LEASE_ROW_CANCEL if cancels else LEASE_ROW)
        self._q_cancel = q(CANCEL)
        self._q_session_lock = "SELECT pg_advisory_xact_lock(%s::bigint)"
        self._q_grant = q(GRANT)
        self._q_grant_within = q(GRANT_WITHIN)
        self._q_lock_holders = LOCK_HOLDERS
        self._q_put_lease = q(
            "INSERT INTO {s}.leases (session, token, owner, expires_at, released)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session) DO UPDATE SET"
            " token = EXCLUDED.token, owner = EXCLUDED.owner,"
            " expires_at = EXCLUDED.expires_at, released = EXCLUDED.released"
        )

    def read(self, db: Conn, session: str) -> tuple[LeaseRow | None, float]:
        """The session's lease row (or None) and the server's clock, on ``db``."""
        return read_lease(db, self._q_lease_row, session)

    def acquire(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        """Take the session if no live lease holds it (see CheckpointStore.acquire_lease).

        One statement, one round trip (:data:`GRANT`, or with a ``lock_wait``
        :data:`GRANT_WITHIN`, tried again until the session's advisory lock is free
        or the bound has passed); when it refuses, a second reads the holder for the
        error (and if the holder let go in between, the grant is tried again).

        The grant commits with the server's durability (``synchronous_commit``):
        letting it skip the WAL flush measured no gain on W4 within the noise, and
        a grant lost in a crash could hand its token out a second time.
        """
        ttl, owner = check_ttl(ttl), check_owner(owner)
        wait = check_lock_wait(lock_wait)
        key = session_key(self._sql.schema, session)
        while True:
            if wait is None:
                # Not retried: a grant whose commit landed before its connection broke
                # must not be granted twice (the caller would hold a token it never saw).
                granted = self._run(
                    lambda db: db.execute(self._q_grant, (session, owner, ttl, key)).fetchone(),
                    what=f"acquire the lease of session {session}",
                    retry=False,
                )
            else:
                granted = self._grant_within(session, owner, ttl, key, wait)
            if granted is not None:
                return Lease(session, int(granted[0]), owner, float(granted[1]))
            row, now = self._run(
                lambda db: read_lease(db, self._q_lease_row, session), what="read a lease"
            )
            grant(session, row, owner, ttl, now)  # raises SessionOwned while a live lease holds it

    def _grant_within(
        self, session: str, owner: str, ttl: float, key: int, wait: float
    ) -> tuple[Any, ...] | None:
        """:data:`GRANT_WITHIN` until it takes the session's lock: the granted row or None.

        Raises:
            SessionOwned / StoreLocked: the lock stayed held ``wait`` seconds.
        """
        deadline = time.monotonic() + wait
        delay = 0.001
        pause = threading.Event()
        while True:
            # Not retried, as the blocking grant (see acquire).
            found = self._run(
                lambda db: db.execute(self._q_grant_within, (key, session, owner, ttl)).fetchone(),
                what=f"acquire the lease of session {session}",
                retry=False,
            )
            assert found is not None  # the statement always returns one row
            locked, token, expires_at = found
            if locked:
                return None if token is None else (token, expires_at)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            pause.wait(min(delay, left))
            delay = min(delay * 2, 0.02)
        row, now = self._run(
            lambda db: read_lease(db, self._q_lease_row, session), what="read a lease"
        )
        unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
        holders = self._run(
            lambda db: db.execute(
                self._q_lock_holders, (unsigned >> 32, unsigned & 0xFFFF_FFFF)
            ).fetchall(),
            what="read who holds a lock",
        )
        raise lease_lock_held(
            session=session,
            where=f"the PostgresStore schema {self._sql.schema!r}",
            lock=f"the session's advisory lock (key {key})",
            waited=wait,
            holder=", ".join(_server_process(h) for h in holders),
            row=row,
            now=now,
        )

    def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend a current lease (see CheckpointStore.renew_lease)."""
        ttl = check_ttl(ttl)
        extended = self._change(lease.session, lambda row, now: renewed(row, lease, ttl, now))
        assert extended is not None
        return extended

    def release(self, lease: Lease) -> None:
        """End a current lease; a stale one is ignored (see CheckpointStore.release_lease)."""

        def release(row: LeaseRow | None, now: float) -> LeaseRow | None:
            if row is None or row.released or row.token != lease.token:
                return None
            return LeaseRow(row.token, row.owner, row.expires_at, True)

        self._change(lease.session, release)

    def current(self, session: str) -> Lease | None:
        """The live lease of ``session`` by the server's clock, or None."""
        row, now = self._run(
            lambda db: read_lease(db, self._q_lease_row, session), what="read a lease"
        )
        return row.as_lease(session) if row is not None and row.live(now) else None

    def request_cancel(self, session: str, run_id: str) -> bool:
        """Note a cancel of ``run_id`` for the holder of ``session`` (see CancelRequests).

        Raises:
            CheckpointError: the schema has no ``cancels`` table (the role that opened
                it may not create one).
        """
        run_id = check_run_id(run_id)
        if not self._cancels:
            raise CheckpointError(
                f"the PostgresStore schema {self._sql.schema!r} has no table of cancel "
                "requests, and this role may not create it: open the store once with a role "
                "that may create tables in the schema (it adds the table), then cancel again"
            )
        noted = self._run(
            lambda db: db.execute(self._q_cancel, (run_id, session)).fetchone(),
            what=f"request a cancel in session {session}",
        )
        return noted is not None

    def _change(
        self, session: str, rule: Callable[[LeaseRow | None, float], LeaseRow | None]
    ) -> Lease | None:
        """Apply ``rule`` to the session's lease row under its exclusive lock; store its result."""
        schema = self._sql.schema

        def run(db: Conn) -> Lease | None:
            # Pipelined: BEGIN, the lock and the read cost one round trip; the write
            # and the COMMIT a second (a lease taken on resume is on its critical path).
            with db.pipeline() as pipe, db.transaction():
                db.execute(self._q_session_lock, (session_key(schema, session),))
                found = db.execute(self._q_lease_row, (session,))
                pipe.sync()
                current = found.fetchone()
                assert current is not None  # the query always returns one row
                row = rule(*lease_of(current))
                if row is None:
                    return None
                db.execute(
                    self._q_put_lease,
                    (session, row.token, row.owner, row.expires_at, row.released),
                )
                return row.as_lease(session)

        # Not retried: a grant whose commit landed before its connection broke must not
        # be granted twice (the caller would hold a token it never saw).
        changed: Lease | None = self._run(
            run, what=f"change the lease of session {session}", retry=False
        )
        return changed


def _server_process(found: tuple[Any, ...]) -> str:
    """``"server process 4242 (client 10.0.0.7:51234, 'app', idle in transaction, in a
    transaction for 62.0 s)"``, from a row of :data:`LOCK_HOLDERS`."""
    pid, addr, port, application, state, in_transaction = found
    about = []
    if addr is not None:
        about.append(f"client {addr}:{port}")
    if application:
        about.append(repr(application))
    if state:
        about.append(
            state
            if in_transaction is None
            else f"{state}, in a transaction for {in_transaction:.1f} s"
        )
    return f"server process {pid}" + (f" ({', '.join(about)})" if about else "")
