"""PostgresStore's own connection pool, and the check of a connection it hands out.

Kept apart from the store's methods because it is one concern: how connections are
made, checked and replaced (psycopg_pool does the pooling and the reconnecting).
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
import psycopg_pool

__all__ = ["check_idle", "new_pool"]

Conn = psycopg.Connection[Any]


def new_pool(
    dsn: str,
    *,
    schema: str,
    pool_size: int,
    timeout: float,
    max_lifetime: float,
    max_idle: float,
) -> psycopg_pool.ConnectionPool[Any]:
    """A closed pool of autocommit connections to ``dsn`` (open it with ``open()``).

    Each connection is checked with :func:`check_idle` when the pool hands it out.
    """
    return psycopg_pool.ConnectionPool(
        dsn,
        min_size=1,
        max_size=pool_size,
        kwargs={"autocommit": True},
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
    under one) is found out by the call, which ``PostgresStore._run`` retries once
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
