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

Closing the store never waits long for the thread: :meth:`WalCheckpointer.close`
interrupts a running checkpoint (``sqlite3.Connection.interrupt``, safe from any
thread), and the connection is closed by whichever of the two is last to use it,
never under a statement.

SQLite's own ``wal_autocheckpoint`` stays set, at twice the mark, as the bound
when this thread cannot keep it (another process's saves, which this store does
not count; a failed background checkpoint; a forked child, which has no thread):
the commit that crosses it checkpoints inline, as SQLite always did. A failed
background checkpoint loses nothing committed: the log keeps every page until a
checkpoint has copied it and fsynced the database.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable

__all__ = ["CHECKPOINT_BYTES", "WalCheckpointer"]

_log = logging.getLogger(__name__)

CHECKPOINT_BYTES = 256 * 1024
"""Estimated bytes appended to the log since the last checkpoint that start the next."""

SETTLE_TIMEOUT_S = 5.0
"""How long a save waits for a running checkpoint before it goes ahead regardless
(and how long closing waits for the thread to end)."""


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
    :meth:`close` by any thread. One condition guards the state: a checkpoint is
    *handed over* from the moment :meth:`wrote` decides to start a thread until that
    thread ends, so a saver that settles in between (the thread created, not yet
    started) waits for it like for a running one.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._cond = threading.Condition(threading.Lock())
        self._bytes = 0
        self._due = False
        self._active = False
        """A thread was handed the due checkpoints and has not ended."""
        self._pid = 0
        """The process whose thread ``_active`` means (a forked child has none)."""
        self._running = False
        """The thread is inside a checkpoint statement on ``_conn`` (close interrupts it)."""
        self._closed = False
        self._thread: threading.Thread | None = None
        """The last thread, set once it has started (so joining it is always allowed)."""
        self._conn: sqlite3.Connection | None = None

    def wrote(self, size: int) -> None:
        """A save's commit appended about ``size`` bytes to the log; past the mark, checkpoint.

        Called right after the commit, on the saving thread; returns at once.
        """
        with self._cond:
            if self._closed:
                return
            self._bytes += size
            if self._bytes < CHECKPOINT_BYTES:
                return
            self._bytes = 0
            self._due = True
            if self._active and self._pid == os.getpid():
                return  # the thread checkpoints once more before it ends
            # (A forked child inherits ``_active`` but not the thread: it starts its own.)
            self._active, self._pid = True, os.getpid()
        thread = threading.Thread(target=self._run, name="actorflow-sqlite-wal", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # no thread to be had: SQLite's own bound holds
            _log.debug("background WAL checkpoint not started: %s", exc)
            with self._cond:
                self._active = False
                self._cond.notify_all()
            return
        with self._cond:
            self._thread = thread

    def settle(self) -> None:
        """Wait (at most :data:`SETTLE_TIMEOUT_S`) for the checkpoint handed over, if any.

        Called by a save before it begins, so that it starts the log afresh.
        """
        with self._cond:
            if self._pid == os.getpid():  # a forked child has no thread to wait for
                self._cond.wait_for(self._settled, SETTLE_TIMEOUT_S)

    def close(self) -> None:
        """Stop checkpointing and close the connection. Idempotent.

        A running checkpoint is interrupted (it loses nothing: the log keeps every page
        until a checkpoint has copied it); the thread is waited for at most
        :data:`SETTLE_TIMEOUT_S`, and if it is still running then, it closes the
        connection itself when it ends.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            ours = self._pid == os.getpid()
            if ours and self._running and self._conn is not None:
                self._conn.interrupt()
            thread = self._thread if ours else None
        if thread is not None and thread is not threading.current_thread():
            thread.join(SETTLE_TIMEOUT_S)
        with self._cond:
            if self._active and ours:
                return  # still running: it closes the connection as it ends
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _settled(self) -> bool:
        return not self._active or self._closed

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                with self._cond:
                    if not self._due or self._closed:
                        return
                    conn = self._conn
                    if conn is not None:
                        self._due, self._running = False, True
                if conn is None:
                    conn = self._connect()
                    with self._cond:
                        self._conn = conn
                    continue  # closed meanwhile? (checked above, under the condition)
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                finally:
                    with self._cond:
                        self._running = False
        except Exception as exc:  # noqa: BLE001  # see the module docstring: SQLite's bound holds
            _log.debug("background WAL checkpoint failed: %s", exc)
            with self._cond:
                if self._conn is conn:  # a fresh one next time
                    self._conn = None
            if conn is not None:
                conn.close()  # not under a statement, and close() no longer sees it
        finally:
            with self._cond:
                self._active = False
                self._cond.notify_all()
                doomed, self._conn = (self._conn, None) if self._closed else (None, self._conn)
            if doomed is not None:
                doomed.close()
