"""SQLiteStore's connections: one per thread, their settings, and its transactions.

A base of :class:`~._sqlite.SQLiteStore`, kept apart because it is one concern:
how connections are opened (WAL, ``synchronous=FULL``, the busy timeout, the log's
bounds), which thread uses which, and the read and write transactions every
method runs in.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

from actorflow.errors import CheckpointCorrupt, CheckpointError

from . import _sqlite_sql as sql
from ._base import StoreBase
from ._sqlite_wal import CHECKPOINT_BYTES, WalCheckpointer

__all__ = ["SQLiteConnections"]


class SQLiteConnections(StoreBase):
    """Per-thread connections to one SQLite file, and transactions on them.

    Thread-safe: each thread uses its own connection; :meth:`close` closes all.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._local = threading.local()
        self._conns: list[tuple[weakref.ref[threading.Thread], sqlite3.Connection]] = []
        self._conns_lock = threading.Lock()
        self._wal = WalCheckpointer(self._connect)

    def close(self) -> None:
        """Close every connection this store opened, in any thread. Idempotent."""
        self._wal.close()
        with self._conns_lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for _, conn in conns:
            conn.close()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and not self._closed:
            return conn
        self._check_open()
        conn = self._connect()
        with self._conns_lock:
            if self._closed:
                conn.close()
                self._check_open()
            # Connections of threads that have ended are closed here, so a service
            # whose worker threads come and go does not accumulate open files.
            alive = []
            for thread_ref, other in self._conns:
                thread = thread_ref()
                if thread is not None and thread.is_alive():
                    alive.append((thread_ref, other))
                else:
                    other.close()
            alive.append((weakref.ref(threading.current_thread()), conn))
            self._conns = alive
        self._local.conn = conn
        self._forget_blobs()
        return conn

    def _known_blobs(self, db: sqlite3.Connection) -> dict[str, int]:
        """Digest -> id of blobs this thread's connection knows stored (see sql.known_blobs)."""
        return sql.known_blobs(db, self._local)

    def _forget_blobs(self) -> None:
        """Drop this thread's map of stored blobs (after its connection deleted some)."""
        self._local.blobs = None

    def _connect(self) -> sqlite3.Connection:
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
            # check_same_thread=False only so close() can close other threads'
            # connections; each connection is used by its own thread.
            conn = sqlite3.connect(
                self._path,
                timeout=sql.BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot open SQLite store {self._path}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(sql.BUSY_TIMEOUT_S * 1000)}")
            # Only a new file takes it (before its first write); see sql.PAGE_SIZE.
            conn.execute(f"PRAGMA page_size = {sql.PAGE_SIZE}")
            sql.enable_wal(conn, self._path)
            conn.execute("PRAGMA synchronous = FULL")
            # Keep the write-ahead log small: checkpoint it into the database every
            # ~256 KB (CHECKPOINT_BYTES, on a thread between saves: see _sqlite_wal;
            # SQLite's own autocheckpoint, inline in a commit, only past twice that)
            # and truncate it back to 256 KB afterwards, instead of letting it sit at
            # its high-water mark (4 MB with SQLite's defaults). Measured on W3: ~1 MB
            # less on disk.
            page = int(conn.execute("PRAGMA page_size").fetchone()[0])
            conn.execute(f"PRAGMA wal_autocheckpoint = {2 * CHECKPOINT_BYTES // page}")
            conn.execute(f"PRAGMA journal_size_limit = {CHECKPOINT_BYTES}")
        except sqlite3.Error as exc:
            conn.close()
            raise sql.translate(exc, self._path) from exc
        except UnicodeDecodeError as exc:
            conn.close()
            raise CheckpointCorrupt(f"SQLite store {self._path} is damaged: {exc}") from exc
        return conn

    @contextlib.contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction; BEGIN IMMEDIATE queues for the write lock up front.

        ``durable=False`` (lease changes): commit without the WAL fsync
        (``synchronous=NORMAL`` for this transaction only). A lease is only worth
        something while its holder lives, and a power loss that undoes the commit
        ends the holder too; the next durable commit (a checkpoint save, which
        fences on the lease in its own transaction) fsyncs it along. Opening a
        session takes a lease, often from an event loop's thread (``async with
        wf.session(...)``): the fsync cost ~0.5-1 ms per open (20 opens in one loop
        step: a 30 ms loop stall, ``bench.loop_lag``), without it ~0.25 ms.
        """
        if durable:
            with self._transaction("BEGIN IMMEDIATE") as conn:
                yield conn
            return
        conn = self._conn()
        self._pragma(conn, "PRAGMA synchronous = NORMAL")
        try:
            with self._transaction("BEGIN IMMEDIATE") as conn:
                yield conn
        finally:
            self._pragma(conn, "PRAGMA synchronous = FULL")

    def _pragma(self, conn: sqlite3.Connection, statement: str) -> None:
        try:
            conn.execute(statement)
        except sqlite3.Error as exc:
            raise sql.translate(exc, self._path) from exc

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement in it sees the same snapshot."""
        with self._transaction("BEGIN") as conn:
            yield conn

    @contextlib.contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute(begin)
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise sql.translate(exc, self._path) from exc
        except UnicodeDecodeError as exc:  # text in a damaged page that is not UTF-8
            raise CheckpointCorrupt(f"SQLite store {self._path} is damaged: {exc}") from exc
