"""SQLiteStore's save path: remembered blob ids, page size, WAL checkpoints.

A save takes the ids of blobs it already knows stored from its connection's memory
instead of looking each one up. Whatever deletes a blob in between (this store,
another handle on the file, another thread) must make the next save look again,
so a record can never reference a blob that is gone, nor one whose id was given
to another blob. WAL checkpoints run on a thread of the store between saves; the
log stays as small as with SQLite's inline checkpoints, and saves never depend on
that thread.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from types import SimpleNamespace

import pytest

from actorflow.errors import CheckpointCorrupt, CheckpointError
from actorflow.storage import SQLiteStore, blob_digest
from actorflow.storage.conformance import make_checkpoint
from actorflow.storage.sqlite import _wal as _sqlite_wal
from actorflow.storage.sqlite._wal import WalCheckpointer


def _save_with(store: SQLiteStore, chunk: bytes, *, give: bool) -> None:
    """Save a new record naming ``chunk``; ``give``: pass its bytes along."""
    checkpoint, blobs = make_checkpoint(chunks={"executor": [chunk]})
    store.save(checkpoint, blobs if give else {})


def _ref_rows(path: Path) -> list[tuple[int, int]]:
    """(checkpoint rowid, blob id) of every reference whose blob is not stored."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT checkpoint, blob FROM refs WHERE blob NOT IN (SELECT id FROM blobs)"
        ).fetchall()
    db.close()
    return rows


def test_a_blob_deleted_by_the_same_store_is_looked_up_again(tmp_path: Path) -> None:
    chunk = os.urandom(64)
    with SQLiteStore(tmp_path / "s.db") as store:
        checkpoint, blobs = make_checkpoint(chunks={"executor": [chunk]})
        store.save(checkpoint, blobs)
        _save_with(store, chunk, give=False)  # known stored: fine
        for record in store.list():
            store.delete(record.id)  # the last reference goes: the blob is collected
        with pytest.raises(CheckpointCorrupt, match=blob_digest(chunk)):
            _save_with(store, chunk, give=False)
        _save_with(store, chunk, give=True)  # stored anew under a new id
        assert store.verify() == []
    assert _ref_rows(tmp_path / "s.db") == []


@pytest.mark.parametrize("how", ["prune", "prune_older_than"])
def test_a_blob_pruned_by_another_handle_is_looked_up_again(tmp_path: Path, how: str) -> None:
    """Another handle on the file (as another process would) collects the blob."""
    chunk, other = os.urandom(64), os.urandom(64)
    with SQLiteStore(tmp_path / "s.db") as mine, SQLiteStore(tmp_path / "s.db") as theirs:
        _save_with(mine, chunk, give=True)
        _save_with(mine, chunk, give=False)
        if how == "prune":
            checkpoint, blobs = make_checkpoint(session="session-a", chunks={"e": [other]})
            theirs.save(checkpoint, blobs)
            assert theirs.prune("session-a", keep=1) == 2
        else:
            assert theirs.prune_older_than(time.time() + 3600, whole_sessions=True) == 2
            # The collected blob's id is given to another blob: a stale memory of
            # ids would now name the wrong bytes.
            checkpoint, blobs = make_checkpoint(session="session-b", chunks={"e": [other]})
            theirs.save(checkpoint, blobs)
        with pytest.raises(CheckpointCorrupt, match=blob_digest(chunk)):
            _save_with(mine, chunk, give=False)
        _save_with(mine, other, give=False)  # stored by the other handle: found
        assert mine.verify() == []
    assert _ref_rows(tmp_path / "s.db") == []


def test_a_blob_deleted_by_another_thread_is_looked_up_again(tmp_path: Path) -> None:
    """Threads of one store have connections of their own; each sees the others' deletes."""
    chunk = os.urandom(64)
    with SQLiteStore(tmp_path / "s.db") as store:
        _save_with(store, chunk, give=True)
        _save_with(store, chunk, give=False)
        errors: list[BaseException] = []

        def delete_all() -> None:
            try:
                for record in store.list():
                    store.delete(record.id)
            except BaseException as exc:  # reported below
                errors.append(exc)

        thread = threading.Thread(target=delete_all)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive() and errors == []
        with pytest.raises(CheckpointCorrupt, match=blob_digest(chunk)):
            _save_with(store, chunk, give=False)
    assert _ref_rows(tmp_path / "s.db") == []


def test_a_rolled_back_save_leaves_no_remembered_blob(tmp_path: Path) -> None:
    """A save that fails after inserting its new blob: that blob was never stored."""
    with SQLiteStore(tmp_path / "s.db") as store:
        _save_with(store, os.urandom(64), give=True)
        # A temporary trigger (this connection only: no other connection commits) makes
        # the reference rows fail, after the new blob's row went in.
        conn = store._connections.conn()
        conn.execute(
            "CREATE TEMP TRIGGER refuse BEFORE INSERT ON main.refs"
            " BEGIN SELECT RAISE(ABORT, 'refused by a test'); END"
        )
        chunk = os.urandom(64)
        with pytest.raises(CheckpointError, match="refused by a test"):
            _save_with(store, chunk, give=True)
        conn.execute("DROP TRIGGER refuse")
        with pytest.raises(CheckpointCorrupt, match=blob_digest(chunk)):
            _save_with(store, chunk, give=False)
        assert store.verify() == []
    assert _ref_rows(tmp_path / "s.db") == []


def test_saves_name_every_blob_by_its_id(tmp_path: Path) -> None:
    """The reference rows a save writes (many per record) are exactly its blobs."""
    chunks = [os.urandom(32) for _ in range(450)]  # more than one INSERT's worth
    with SQLiteStore(tmp_path / "s.db") as store:
        first, blobs = make_checkpoint(chunks={"a": chunks[:300], "b": chunks[300:]})
        store.save(first, blobs)
        second, more = make_checkpoint(chunks={"a": chunks[:300], "b": [os.urandom(32)]})
        store.save(second, more)
        with sqlite3.connect(tmp_path / "s.db") as db:
            named = {
                cid: sorted(
                    d
                    for (d,) in db.execute(
                        "SELECT b.digest FROM refs r JOIN checkpoints c ON c.rowid = r.checkpoint"
                        " JOIN blobs b ON b.id = r.blob WHERE c.id = ?",
                        (cid,),
                    )
                )
                for cid in (first.id, second.id)
            }
        db.close()
        assert named[first.id] == sorted(first.blob_digests())
        assert named[second.id] == sorted(second.blob_digests())
        store.delete(first.id)
        assert store.verify() == []
        kept = {blob_digest(c) for c in chunks[:300]}
        assert store.has_blobs(first.blob_digests()) == kept


# --- page size and WAL checkpoints ---------------------------------------------------


def _pragma(path: Path, name: str) -> int:
    with sqlite3.connect(path) as db:
        (value,) = db.execute(f"PRAGMA {name}").fetchone()
    db.close()
    return int(value)


def _wal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "actorflow-sqlite-wal"]


def test_new_files_get_2k_pages_and_old_files_keep_theirs(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "new.db") as store:
        assert _pragma(tmp_path / "new.db", "page_size") == 2048
        # SQLite's own checkpoint, inline in a commit, only at twice the thread's mark.
        assert store._connections.conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 256
        assert (
            store._connections.conn().execute("PRAGMA journal_size_limit").fetchone()[0] == 262_144
        )
    with contextlib.closing(sqlite3.connect(tmp_path / "old.db")) as db:
        db.execute("PRAGMA page_size = 4096")
        db.execute("CREATE TABLE placeholder (x)")  # fixes the page size
        db.execute("DROP TABLE placeholder")
    with SQLiteStore(tmp_path / "old.db") as store:
        _save_with(store, os.urandom(64), give=True)
        assert _pragma(tmp_path / "old.db", "page_size") == 4096
        assert store._connections.conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 128


def test_checkpoints_run_on_a_thread_and_keep_the_log_small(tmp_path: Path) -> None:
    """Saves of ~3 MB in all: the log is checkpointed between them, on the store's
    thread, and starts afresh, so it never holds more than the mark and a save or so."""
    path = tmp_path / "s.db"
    wal = tmp_path / "s.db-wal"
    largest = 0
    with SQLiteStore(path) as store:
        parent = None
        for _ in range(40):
            checkpoint, blobs = make_checkpoint(chunks={"e": [os.urandom(75_000)]}, parent=parent)
            store.save(checkpoint, blobs)
            parent = checkpoint
            largest = max(largest, wal.stat().st_size)
        assert store._wal._conn is not None  # the thread's connection: it checkpointed
        assert largest <= 256 * 1024 + 2 * 90_000, largest  # the mark, one save, frame headers
        assert path.stat().st_size > 2_500_000  # the pages went into the database file
        assert len(store.list()) == 40 and store.verify() == []
    assert _wal_threads() == []
    with SQLiteStore(path) as store:  # and everything committed is there
        assert len(store.list()) == 40
        assert store.latest() == parent


def test_the_thread_ends_when_no_checkpoint_is_due(tmp_path: Path) -> None:
    """No thread outlives its checkpoint, so a store dropped unclosed leaves none."""
    store = SQLiteStore(tmp_path / "s.db")
    for _ in range(6):
        _save_with(store, os.urandom(75_000), give=True)
    assert store._wal._conn is not None  # a checkpoint ran
    for thread in _wal_threads():
        thread.join(timeout=10)
    assert _wal_threads() == []
    _save_with(store, os.urandom(75_000), give=True)  # the next checkpoint starts another
    for other in _wal_threads():
        other.join(timeout=10)
    assert store.verify() == [] and len(store.list()) == 7
    store.close()


class _BrokenOpener:
    def __init__(self) -> None:
        self.calls = 0

    def connect(self) -> sqlite3.Connection:
        self.calls += 1
        raise sqlite3.OperationalError("unable to open database file (a test)")


def test_saves_go_on_when_background_checkpoints_fail(tmp_path: Path) -> None:
    """A checkpoint thread that cannot open the file: saves do not wait for it, and
    SQLite's own inline checkpoint still bounds the log."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        opener = _BrokenOpener()
        store._wal.close()
        store._wal = WalCheckpointer(opener.connect)
        largest = 0
        for _ in range(30):
            _save_with(store, os.urandom(75_000), give=True)
            largest = max(largest, (tmp_path / "s.db-wal").stat().st_size)
        assert len(store.list()) == 30 and store.verify() == []
        assert opener.calls >= 3  # it was tried again after each failure
        # Without the thread, SQLite checkpoints inline at twice the mark.
        assert largest <= 2 * 256 * 1024 + 2 * 90_000, largest


def test_a_save_waits_for_a_checkpoint_whose_thread_is_still_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint handed over, its thread not started yet: a save that settles now
    waits for that checkpoint (it used to join the unstarted thread and fail with
    "cannot join thread before it is started", failing the run's checkpoint)."""
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    handed, release, ran = threading.Event(), threading.Event(), threading.Event()

    class HeldStart(threading.Thread):
        def start(self) -> None:  # the window: handed over, not started
            handed.set()
            assert release.wait(30)
            super().start()

    def connect() -> sqlite3.Connection:
        ran.set()
        return sqlite3.connect(path, check_same_thread=False)

    monkeypatch.setattr(
        _sqlite_wal, "threading", SimpleNamespace(**{**vars(threading), "Thread": HeldStart})
    )
    wal = WalCheckpointer(connect)
    with ThreadPoolExecutor(2) as pool:
        try:
            wrote = pool.submit(wal.wrote, _sqlite_wal.CHECKPOINT_BYTES)
            assert handed.wait(30)
            settled = pool.submit(wal.settle)
            with pytest.raises(FutureTimeout):
                settled.result(timeout=0.5)  # it waits for the checkpoint (and does not raise)
            release.set()
            settled.result(timeout=30)
            assert ran.is_set()  # it returned once the checkpoint had run
            wrote.result(timeout=30)
        finally:
            release.set()
            wal.close()


class _CheckpointUntilInterrupted:
    """Stands in for the checkpoint thread's connection: its checkpoint runs until interrupted."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.interrupted = threading.Event()
        self.in_statement = False
        self.closes: list[bool] = []  # for each close(): was a statement running on it?

    def execute(self, statement: str) -> None:
        self.in_statement = True
        self.running.set()
        try:
            assert self.interrupted.wait(30), "never interrupted"
            raise sqlite3.OperationalError("interrupted")
        finally:
            self.in_statement = False

    def interrupt(self) -> None:
        self.interrupted.set()

    def close(self) -> None:
        self.closes.append(self.in_statement)


def test_closing_interrupts_a_running_checkpoint_and_never_closes_under_it() -> None:
    """close() stops a long checkpoint instead of waiting for it (it used to join the
    thread without a bound), and the connection is closed once, after its statement."""
    conn = _CheckpointUntilInterrupted()
    wal = WalCheckpointer(lambda: conn)  # type: ignore[arg-type, return-value]
    wal.wrote(_sqlite_wal.CHECKPOINT_BYTES)
    assert conn.running.wait(30)
    started = time.monotonic()
    wal.close()
    assert time.monotonic() - started < _sqlite_wal.SETTLE_TIMEOUT_S
    assert conn.interrupted.is_set()
    assert conn.closes == [False]
    assert _wal_threads() == []
    wal.close()  # idempotent
    assert conn.closes == [False]
