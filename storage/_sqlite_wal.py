"""SQLiteStore's WAL checkpoints, run between saves on a thread of their own.

A save is durable once its commit has appended its pages to the write-ahead log
and fsynced it. Copying those pages into the database file (a WAL checkpoint,
which fsyncs the database) only bounds the log's size. SQLite runs it inside the
commit that crosses ``wal_autocheckpoint``: on W3, one save in five or six took
~2 ms longer (~0.35 ms per superstep on average, a sixth of the fsync floor).

Here the save whose commit crosses :data:`CHECKPOINT_BYTES` (estimated from what
the saves wrote) hands the checkpoint to a thread and returns. The thread copies
the log while the caller computes its next superstep (SQLite runs the checkpoint
with the GIL released). The next save waits for it to finish before it begins
(:meth:`WalCheckpointer.settle`): that save then starts the log afresh from its
beginning, as after an inline checkpoint. So the log's size is bounded as before,
and what a save waits for is only the part of the checkpoint its caller's own
work did not cover.

SQLite's own ``wal_autocheckpoint`` stays set, at twice the mark, as the bound
when this thread cannot keep it (another process's saves, which this store does
not count; a failed background checkpoint; a forked child, which has no thread):
the commit that crosses it checkpoints inline, as SQLite always did. A failed
background checkpoint loses nothing committed: the log keeps every page until a
checkpoint has copied it and fsynced the database.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

__all__ = ["CHECKPOINT_BYTES", "WalCheckpointer"]

_log = logging.getLogger(__name__)

CHECKPOINT_BYTES = 256 * 1024
"""Estimated bytes appended to the log since the last checkpoint that start the next."""

SETTLE_TIMEOUT_S = 5.0
"""How long a save waits for a running checkpoint before it goes ahead regardless."""


class WalCheckpointer:
    """Runs PASSIVE WAL checkpoints of one database file on short-lived daemon threads.

    A thread is started when a checkpoint is due and ends when none is: an idle
    store (or one dropped without :meth:`close`) has no thread. PASSIVE
    checkpoints take no write lock and never wait: saves of other stores and
    other processes go on while one runs, and a checkpoint that cannot copy
    everything now leaves the rest to the next one.

    Args:
        connect: opens a new connection to the database; called on the thread, once
            (the connection is kept for the next checkpoints, closed by :meth:`close`).

    Thread-safe: :meth:`wrote` and :meth:`settle` are called by saving threads,
    :meth:`close` by any thread.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._bytes = 0
        self._due = False
        self._active = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None

    def wrote(self, size: int) -> None:
        """A save's commit appended about ``size`` bytes to the log; past the mark, checkpoint.

        Called right after the commit, on the saving thread; returns at once.
        """
        with self._lock:
            if self._closed:
                return
            self._bytes += size
            if self._bytes < CHECKPOINT_BYTES:
                return
            self._bytes = 0
            self._due = True
            if self._active and self._thread is not None and self._thread.is_alive():
                return  # the running thread checkpoints once more before it ends
            # (A forked child inherits ``_active`` but not the thread: it starts its own.)
            self._active = True
            self._thread = threading.Thread(
                target=self._run, name="actorflow-sqlite-wal", daemon=True
            )
            self._thread.start()

    def settle(self) -> None:
        """Wait (at most :data:`SETTLE_TIMEOUT_S`) for the checkpoint handed over, if any.

        Called by a save before it begins, so that it starts the log afresh.
        """
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(SETTLE_TIMEOUT_S)

    def close(self) -> None:
        """Wait for a running checkpoint, then close the connection. Idempotent."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._due or self._closed:
                    self._active = False
                    return
                self._due = False
                conn = self._conn
            try:
                if conn is None:
                    conn = self._connect()
                    with self._lock:
                        self._conn = conn  # close() joins this thread before it reads this
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except Exception as exc:  # noqa: BLE001  # see the module docstring: SQLite's bound holds
                _log.debug("background WAL checkpoint failed: %s", exc)
                with self._lock:
                    self._active = False
                    if self._conn is not None:  # a fresh one next time
                        self._conn.close()
                        self._conn = None
                return
