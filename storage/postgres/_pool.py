"""PostgresStore's connections: its own pool, the check of a connection it hands out,
and running a call on a pooled connection.

Kept apart from the store's methods because it is one concern: how connections are
made, checked and replaced (psycopg_pool does the pooling and the reconnecting), and
how their failures become CheckpointErrors. :class:`PostgresConnections` is a
collaborator of :class:`~._store.PostgresStore`, of its leases and its verification.

A forked child never uses its parent's connections: two processes on one socket
read each other's answers (a checkpoint read could get another query's rows), and
closing one ends the server session the parent is using. Right after a fork
(``os.register_at_fork``, in the child's one thread) a store with a pool of its
own makes a new pool, opened at its first call in the child; the inherited one is
kept, never used and never closed (psycopg itself never ends a connection another
process made when one is dropped). A pool the caller gave cannot be replaced:
there, every call in the child raises, saying so.
"""

from __future__ import annotations

import math
import select
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

from actorflow._forks import forget_in_children
from actorflow.errors import CheckpointCorrupt, CheckpointError, StoreClosed
from actorflow.storage._common import store_closed

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "PostgresConnections",
    "check_idle",
    "connect_settings",
    "new_pool",
    "probe",
]

T = TypeVar("T")

Conn = psycopg.Connection[Any]


DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds a new connection may take when neither the store nor the DSN says."""


def connect_settings(dsn: str, connect_timeout: float | None) -> dict[str, Any]:
    """The keyword arguments of every connection the store makes to ``dsn``.

    Autocommit, and a bound on connecting: ``connect_timeout`` if given, else the
    DSN's own ``connect_timeout``, else :data:`DEFAULT_CONNECT_TIMEOUT` (libpq counts
    whole seconds, at least 2).

    Raises:
        ValueError: ``connect_timeout`` is not a positive number.
        CheckpointError: ``dsn`` is not a connection string libpq accepts (a
            mistyped option, say), with libpq's own reason.
    """
    try:
        given = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason = " ".join(str(exc).split())
        raise CheckpointError(
            f"PostgresStore: the DSN is not valid: {reason}; fix it (libpq's parameters are "
            "listed at https://www.postgresql.org/docs/current/libpq-connect.html"
            "#LIBPQ-PARAMKEYWORDS)"
        ) from None
    if connect_timeout is None:
        default = str(math.ceil(DEFAULT_CONNECT_TIMEOUT))
        return {"autocommit": True, "connect_timeout": given.get("connect_timeout", default)}
    if not connect_timeout > 0:
        raise ValueError(
            f"connect_timeout must be a positive number of seconds, not {connect_timeout!r}"
        )
    return {"autocommit": True, "connect_timeout": str(math.ceil(connect_timeout))}


def probe(dsn: str, settings: dict[str, Any], where: str) -> None:
    """Connect to ``dsn`` once and hang up: the server's own reason if it refuses.

    A pool retries a failed connection in the background until its timeout and
    logs each failure; what fails here (no server listening, an unknown database or
    role, a wrong password, a server that does not answer within the connect
    timeout) does not go away by waiting, so the store reports it at once.

    Raises:
        CheckpointError: the connection failed; the message carries the server's reason.
    """
    try:
        psycopg.connect(dsn, **settings).close()
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
        raise CheckpointError(
            f"PostgresStore: cannot connect to {where}: {reason}; check that the server is up "
            "and the DSN's host, port, user, password and database are right"
        ) from exc


def new_pool(
    dsn: str,
    *,
    schema: str,
    pool_size: int,
    timeout: float,
    max_lifetime: float,
    max_idle: float,
    settings: dict[str, Any],
) -> psycopg_pool.ConnectionPool[Any]:
    """A closed pool of connections to ``dsn`` (open it with ``open()``), each made with
    ``settings`` (:func:`connect_settings`).

    Each connection is checked with :func:`check_idle` when the pool hands it out.
    """
    return psycopg_pool.ConnectionPool(
        dsn,
        min_size=1,
        max_size=pool_size,
        kwargs=settings,
        check=check_idle,
        timeout=timeout,
        max_lifetime=max_lifetime,
        max_idle=max_idle,
        open=False,
        name=f"actorflow-{schema}",
    )


def check_idle(conn: Conn) -> None:
    """Raise unless ``conn`` (idle in the pool) is still usable; the pool then replaces it.

    A round trip (``ConnectionPool.check_connection``) only when the connection may
    be gone. The server sends an idle connection nothing unasked (the store never
    listens for notifications) except when it ends the session: on a restart, a
    ``pg_terminate_backend`` or a crash of its process it sends a termination
    notice or closes the socket. So a socket with something to read, or a
    connection psycopg already knows to be broken, is checked for real; any other
    is handed out without a round trip, which would cost ~0.1-0.4 ms on every call
    of the store. A connection that breaks after this check (between two calls, or
    under one) is found out by the call, which ``PostgresConnections.run`` retries once
    on a new connection, as it would after the round-trip check.

    Raises:
        psycopg.OperationalError: the connection is broken or closed.
    """
    if conn.closed or conn.broken or _readable(conn.fileno()):
        psycopg_pool.ConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    """Whether the socket ``fd`` has data (or its end) to read, without waiting."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])  # Windows: no poll, no fd limit either


class PostgresConnections:
    """The pool of one PostgresStore, and its calls on pooled connections.

    Args:
        pool: the pool (the store's own, or one its caller owns).
        owns_pool: whether :meth:`close` closes ``pool``.
        where: the server or pool, as messages name it (no password).
        name: how a closed store's error names it (``PostgresStore(...)``).
    """

    def __init__(
        self,
        pool: psycopg_pool.ConnectionPool[Any],
        *,
        owns_pool: bool,
        where: str,
        name: str,
        make_pool: Callable[[], psycopg_pool.ConnectionPool[Any]] | None = None,
    ) -> None:
        self.pool = pool
        self.owns_pool = owns_pool
        self._where = where
        self._name = name
        self._closed = False
        self._make_pool = make_pool
        """A new, unopened pool like the store's own (None: the caller owns the pool)."""
        self._unopened = False
        """In a forked child: the pool of its own is made but not opened yet."""
        self._open_lock = threading.Lock()
        self._inherited: list[psycopg_pool.ConnectionPool[Any]] = []
        """In a forked child: its parent's pools (never used, never closed)."""
        forget_in_children(self)

    def forget_parent(self) -> None:
        """In a forked child, right after the fork (its only thread): the pool is the
        parent's (see the module docstring); a store's own is replaced."""
        self._inherited.append(self.pool)
        self._open_lock = threading.Lock()
        if self._make_pool is not None and not self._closed:
            self.pool = self._make_pool()
            self._unopened = True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Refuse later calls and close the pool if it is the store's own. Idempotent."""
        self._closed = True
        if self.owns_pool:
            self.pool.close()

    def run(self, work: Callable[[Conn], T], *, what: str, retry: bool = True) -> T:
        """``work(connection)`` with a pooled connection; errors become CheckpointErrors.

        A connection that breaks under ``work`` (server restarted, backend
        terminated) is discarded by the pool; ``work`` runs once more on a fresh one.
        """
        if self._closed:
            raise store_closed(self._name)
        if self._inherited:
            self._check_forked()
        attempts = 2 if retry else 1
        for attempt in range(attempts):
            try:
                with self.pool.connection() as db:
                    return work(db)
            except psycopg_pool.PoolClosed as exc:
                raise self._pool_closed(exc) from exc
            except psycopg_pool.PoolTimeout as exc:
                raise CheckpointError(
                    f"PostgresStore could not {what}: no free connection to {self._where} "
                    f"within the pool's timeout ({exc}); the pool is exhausted or the server "
                    "is down: give the store a larger pool_size, or free connections"
                ) from exc
            except psycopg.OperationalError as exc:
                if attempt + 1 < attempts and connection_lost(exc):
                    continue
                raise CheckpointError(
                    f"PostgresStore could not {what} on {self._where}: {exc}".rstrip()
                    + "; nothing of this call was committed unless a later read shows it"
                ) from exc
            except pg_errors.DataCorrupted as exc:
                raise CheckpointCorrupt(
                    f"PostgresStore {self._where}: the server reports damaged data: {exc}"
                ) from exc
            except psycopg.Error as exc:
                raise CheckpointError(
                    f"PostgresStore could not {what} on {self._where}: {exc}"
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_forked(self) -> None:
        """In a forked child: open the store's own pool at the first call (it connects in
        the background; calls wait for a connection as ever), or refuse a caller's pool."""
        if self._make_pool is None:
            raise CheckpointError(
                f"{self._name} runs in a process forked from the one that gave it its "
                "connection pool, whose connections are the parent's: open a store in this "
                "process with a pool of its own (PostgresStore(dsn) makes one)"
            )
        if self._unopened:
            with self._open_lock:
                if self._unopened:
                    self.pool.open(wait=False)
                    self._unopened = False

    def _pool_closed(self, exc: psycopg_pool.PoolClosed) -> StoreClosed:
        """The error for a call whose pool was closed: by :meth:`close`, or by its owner."""
        if self._closed or self.owns_pool:
            return store_closed(self._name)
        return StoreClosed(
            f"{self._name}: the connection pool it was given is closed ({exc}), so this call did "
            "not run; the store cannot work without it: give a new store an open pool"
        )


def connection_lost(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` means the connection itself is gone (so a new one may work)."""
    if isinstance(exc, pg_errors.AdminShutdown | pg_errors.CannotConnectNow):
        return True
    return exc.sqlstate is None or exc.sqlstate.startswith("08")
