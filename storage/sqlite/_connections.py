"""SQLiteStore's connections: one per thread, their settings, and its transactions.

:class:`SQLiteConnections` is a collaborator of :class:`~._store.SQLiteStore`
(and of its leases and verification), which owns one concern: how connections are opened (WAL, ``synchronous=FULL``, the busy timeout, the log's
bounds), which thread uses which, and the read and write transactions every
method runs in.

Closing while other threads run calls: a connection is closed only by a thread
that nobody's statement runs on it. SQLite must never see a connection closed
under a running statement (the process crashes: a use after free in the
library), so :meth:`SQLiteConnections.close` closes the idle connections at once
and interrupts the statements running on the others (``Connection.interrupt``,
safe from any thread); each of those is closed by its own thread as its call
ends, and the call raises :class:`~actorflow.errors.StoreClosed` (or finishes, if
the interrupt came when no statement was left to stop). Closing never waits.

A forked child never uses its parent's connections: SQLite forbids carrying one
across fork(2) ("any database connection that is used in a child process must be
opened in the child process"). Right after a fork (``os.register_at_fork``, in the
child's one thread) every store forgets them, keeping them unused and unclosed
(closing one runs SQLite's locking and checkpointing on it), and each of the
child's threads opens its own.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from actorflow._forks import forget_in_children
from actorflow.errors import CheckpointCorrupt, CheckpointError
from actorflow.storage._common import store_closed

from . import _sql as sql
from ._wal import CHECKPOINT_BYTES
from ._writers import WriterQueue, writer_queue

__all__ = ["SQLiteConnections", "WriteLockBusy"]


class WriteLockBusy(CheckpointError):
    """A write transaction did not get the file's write lock within its bound."""


@dataclass(eq=False, slots=True)
class _Held:
    """One thread's connection, and how many calls of that thread are using it."""

    conn: sqlite3.Connection
    thread: weakref.ref[threading.Thread]
    depth: int = 0


class SQLiteConnections:
    """Per-thread connections to one SQLite file, and transactions on them.

    Thread-safe: each thread uses its own connection; :meth:`close`, from any
    thread and while other threads' calls run, closes all (see the module docstring).

    Args:
        path: the database file.
        name: how a closed store's error names it (``SQLiteStore('/path')``).
    """

    def __init__(self, path: Path, name: str) -> None:
        self._path = path
        self._name = name
        self._closed = False
        self._local = threading.local()
        self._conns: list[_Held] = []
        """Every open connection; those in use (``depth``) are closed by their thread."""
        self._conns_lock = threading.Lock()
        self._writers: WriterQueue | None = None
        """This process's writers to the file (see _writers); found at the first write."""
        self._inherited: list[sqlite3.Connection] = []
        """A forked child's copies of its parent's connections: never used, never closed."""
        forget_in_children(self)

    def forget_parent(self) -> None:
        """In a forked child, right after the fork (its only thread): the parent's
        connections and write queue are not this process's (see the module docstring),
        nor are the locks the parent's other threads held."""
        self._inherited += [held.conn for held in self._conns]
        self._conns = []
        self._conns_lock = threading.Lock()
        self._local = threading.local()
        self._writers = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise store_closed(self._name)

    def close(self) -> None:
        """Close every connection opened here, in any thread. Idempotent; never waits
        for a call: one running is interrupted and raises StoreClosed (see the module docstring).
        """
        with self._conns_lock:
            self._closed = True
            idle = [held for held in self._conns if not held.depth]
            self._conns = [held for held in self._conns if held.depth]
            for held in self._conns:
                # Under the lock: its thread closes it only after taking it off the list.
                held.conn.interrupt()
        for held in idle:
            held.conn.close()

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (opened if it has none), not held in use."""
        held = self.hold()
        self.let_go(held)
        return held.conn

    def hold(self) -> _Held:
        """This thread's connection, marked in use until :meth:`_let_go`.

        Raises:
            StoreClosed: the store is closed.
            CheckpointError: a new connection cannot be opened (see ``_connect``).
        """
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None:
            with self._conns_lock:
                if self._closed:
                    raise store_closed(self._name)
                held.depth += 1
            return held
        self._check_open()
        held = _Held(self.connect(), weakref.ref(threading.current_thread()), 1)
        finished: list[_Held] = []
        with self._conns_lock:
            if not self._closed:
                # Connections of threads that have ended are closed here, so a service
                # whose worker threads come and go does not accumulate open files.
                alive = []
                for other in self._conns:
                    thread = other.thread()
                    if other.depth or (thread is not None and thread.is_alive()):
                        alive.append(other)
                    else:
                        finished.append(other)
                alive.append(held)
                self._conns = alive
        for other in finished:
            other.conn.close()
        if self._closed:
            held.conn.close()
            raise store_closed(self._name)
        self._local.held = held
        self.forget_blobs()
        return held

    def let_go(self, held: _Held) -> None:
        """The end of a use of :meth:`_hold`; the last use after a close closes it."""
        with self._conns_lock:
            held.depth -= 1
            if held.depth or not self._closed or held not in self._conns:
                return
            self._conns.remove(held)  # off the list: close() no longer touches it
        held.conn.close()

    def known_blobs(self, db: sqlite3.Connection) -> dict[str, int]:
        """Digest -> id of blobs this thread's connection knows stored (see sql.known_blobs)."""
        return sql.known_blobs(db, self._local)

    def forget_blobs(self) -> None:
        """Drop this thread's map of stored blobs (after its connection deleted some)."""
        self._local.blobs = None

    def connect(self) -> sqlite3.Connection:
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
            # ~256 KB (CHECKPOINT_BYTES, on a thread between saves: see _wal;
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
    def write(
        self, *, durable: bool = True, wait: float | None = None
    ) -> Iterator[sqlite3.Connection]:
        """One write transaction, in this process's turn (see _writers); BEGIN IMMEDIATE
        then takes the write lock up front.

        ``durable=False`` (lease changes): commit without the WAL fsync
        (``synchronous=NORMAL`` for this transaction only). A lease is only worth
        something while its holder lives, and a power loss that undoes the commit
        ends the holder too; the next durable commit (a checkpoint save, which
        fences on the lease in its own transaction) fsyncs it along. Opening a
        session takes a lease, sometimes on an event loop's thread (``async with
        wf.session(...)``; ``wf.asession`` opens in a worker thread): the fsync cost
        ~0.5-1 ms per open (20 opens in one loop step: a 30 ms loop stall,
        ``bench.loop_lag``), without it ~0.25 ms.

        ``wait``: how long one holder may keep the lock before this gives up, in this
        process's queue (which is waited out while it moves) and for another process's
        writer (None: ``BUSY_TIMEOUT_S``).

        Raises:
            WriteLockBusy: the lock stayed with one holder past the bound.
        """
        bound = sql.BUSY_TIMEOUT_S if wait is None else wait
        writers = self._writers
        if writers is None:
            self.conn()  # the file exists from here on
            writers = self._writers = writer_queue(self._path)
        if not writers.acquire(bound):
            raise WriteLockBusy(
                f"SQLite store {self._path}: database is locked (a writer of this process "
                f"held it for {bound:.1f} s)"
            )
        try:
            with self._transaction("BEGIN IMMEDIATE", durable=durable, busy=wait) as conn:
                yield conn
        finally:
            writers.release()

    def pragma(self, conn: sqlite3.Connection, statement: str) -> None:
        """Run ``statement`` on ``conn``, this thread's connection (from :meth:`_conn`),
        held in use meanwhile so that a concurrent :meth:`close` cannot close it under it.

        Raises:
            StoreClosed: the store is closed.
            CheckpointError: the statement failed.
        """
        held = self.hold()
        try:
            held.conn.execute(statement)  # ``conn`` itself: a thread has one connection
        except sqlite3.Error as exc:
            if self._closed:
                raise store_closed(self._name) from exc
            raise sql.translate(exc, self._path) from exc
        finally:
            self.let_go(held)

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement in it sees the same snapshot."""
        with self._transaction("BEGIN") as conn:
            yield conn

    @contextlib.contextmanager
    def _transaction(
        self, begin: str, *, durable: bool = True, busy: float | None = None
    ) -> Iterator[sqlite3.Connection]:
        """``busy``: the busy timeout of this transaction (None: ``BUSY_TIMEOUT_S``)."""
        held = self.hold()
        conn = held.conn
        try:
            if not durable:
                conn.execute("PRAGMA synchronous = NORMAL")
            if busy is not None:
                conn.execute(f"PRAGMA busy_timeout = {int(busy * 1000)}")
            try:
                conn.execute(begin)
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if not durable:
                    conn.execute("PRAGMA synchronous = FULL")
                if busy is not None:
                    conn.execute(f"PRAGMA busy_timeout = {int(sql.BUSY_TIMEOUT_S * 1000)}")
        except sqlite3.Error as exc:
            if self._closed:  # interrupted by close(), or failing because of it
                raise store_closed(self._name) from exc
            if sql.is_busy(exc):
                raise WriteLockBusy(f"SQLite store {self._path}: {exc}") from exc
            raise sql.translate(exc, self._path) from exc
        except UnicodeDecodeError as exc:  # text in a damaged page that is not UTF-8
            raise CheckpointCorrupt(f"SQLite store {self._path} is damaged: {exc}") from exc
        finally:
            self.let_go(held)
