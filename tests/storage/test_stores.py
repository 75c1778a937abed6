"""Behaviour of the built-in stores beyond the conformance kit: layout, schema, lifecycle."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import actorflow.errors
import actorflow.storage
import actorflow.storage.conformance
from actorflow.errors import CheckpointCorrupt, CheckpointError, UnsupportedFormat
from actorflow.storage import FileStore, MemoryStore, SQLiteStore
from actorflow.storage.conformance import make_checkpoint
from tests.storage.test_sqlite_heads import drop_heads

Opener = Callable[[Path], MemoryStore | FileStore | SQLiteStore]
OPENERS: dict[str, Opener] = {
    "memory": lambda _: MemoryStore(),
    "file": lambda tmp: FileStore(tmp / "store"),
    "sqlite": lambda tmp: SQLiteStore(tmp / "store.db"),
}


def test_public_names() -> None:
    """actorflow.storage exports exactly its public API (ruff RUF022 keeps it sorted)."""
    assert set(actorflow.storage.__all__) == {
        "FORMAT_VERSION",
        "BlobBatchReader",
        "CancelRequests",
        "Checkpoint",
        "CheckpointKind",
        "CheckpointStore",
        "CommitsStatements",
        "EncryptedStore",
        "FileStore",
        "HistoryEntry",
        "Lease",
        "MemoryStore",
        "PostgresStore",
        "SQLiteStore",
        "SqlValue",
        "Statement",
        "StoreWrapper",
        "SessionSummary",
        "SummarisesSessions",
        "blob_digest",
        "decode_checkpoint",
        "encode_checkpoint",
        "new_checkpoint_id",
        "session_summaries",
    }
    kit = actorflow.storage.conformance
    assert all(hasattr(kit, name) for name in kit.__all__)


@pytest.mark.parametrize("name", sorted(OPENERS))
def test_context_manager_closes(name: str, tmp_path: Path) -> None:
    """Leaving ``with store:`` closes it; using a closed store raises CheckpointError."""
    with OPENERS[name](tmp_path) as store:
        checkpoint, blobs = make_checkpoint()
        store.save(checkpoint, blobs)
    with pytest.raises(CheckpointError, match="closed"):
        store.load(checkpoint.id)
    with pytest.raises(CheckpointError, match="closed"):
        store.save(*make_checkpoint())
    store.close()  # still idempotent


# --- FileStore ------------------------------------------------------------------------


def test_file_store_refuses_a_foreign_folder(tmp_path: Path) -> None:
    """A non-empty folder that is not a FileStore is refused, and left untouched."""
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not an actorflow FileStore"):
        FileStore(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_file_store_leaves_no_temp_files(tmp_path: Path) -> None:
    """After saves, deletes and prunes, only final files remain."""
    with FileStore(tmp_path) as store:
        parent = None
        for _ in range(5):
            checkpoint, blobs = make_checkpoint(parent=parent)
            store.save(checkpoint, blobs)
            parent = checkpoint
        store.prune("session-a", 2)
    assert [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")] == []


def test_file_store_refuses_ids_unsafe_as_file_names(tmp_path: Path) -> None:
    """A record id with a path separator or leading dot is refused, nothing written."""
    with FileStore(tmp_path) as store:
        for bad in ("../escape", ".hidden", "a/b", ""):
            checkpoint, blobs = make_checkpoint(chunks={})
            with pytest.raises(CheckpointError, match="file name"):
                store.save(dataclasses.replace(checkpoint, id=bad), blobs)
        assert store.list() == []
    assert not (tmp_path / "escape.ckpt").exists()


# --- SQLiteStore ----------------------------------------------------------------------


def test_sqlite_store_pragmas(tmp_path: Path) -> None:
    """The store uses WAL, synchronous=FULL and a 30 s busy timeout."""
    with SQLiteStore(tmp_path / "s.db") as store:
        conn = store._connections.conn()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000


def test_sqlite_lease_changes_skip_the_fsync_and_saves_keep_it(tmp_path: Path) -> None:
    """Lease transactions commit at synchronous=NORMAL, and leave the connection at FULL."""
    with SQLiteStore(tmp_path / "s.db") as store:
        conn = store._connections.conn()
        seen: list[int] = []
        with store._connections.write(durable=False) as db:
            seen.append(db.execute("PRAGMA synchronous").fetchone()[0])
        lease = store.acquire_lease("s", "me", 30.0)
        store.renew_lease(lease, 30.0)
        store.release_lease(lease)
        assert seen == [1]  # NORMAL inside the lease transaction
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL again after
        with pytest.raises(RuntimeError), store._connections.write(durable=False):
            raise RuntimeError("a failed lease transaction")
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # also after a failure
        checkpoint, blobs = make_checkpoint(session="s")
        store.save(checkpoint, blobs)
        assert store.latest(session="s") == checkpoint


def test_sqlite_store_refuses_a_newer_schema(tmp_path: Path) -> None:
    """A file with a newer actorflow schema raises UnsupportedFormat."""
    SQLiteStore(tmp_path / "s.db").close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute("UPDATE actorflow_schema SET version = 99")
    db.close()
    with pytest.raises(UnsupportedFormat, match="schema 99"):
        SQLiteStore(tmp_path / "s.db")


def test_sqlite_store_upgrades_schema_2_in_place(tmp_path: Path) -> None:
    """A schema-2 file (with the three indexes schema 3 dropped) opens, upgraded, data intact."""
    with SQLiteStore(tmp_path / "s.db") as store:
        first, blobs = make_checkpoint(session="s", chunks={"e": [b"shared", b"first only"]})
        store.save(first, blobs)
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db, db:
        db.execute("CREATE INDEX checkpoints_by_workflow ON checkpoints (workflow, id)")
        db.execute("CREATE INDEX checkpoints_by_kind ON checkpoints (kind, id)")
        db.execute("CREATE INDEX refs_by_blob ON refs (blob)")
        db.execute("DROP TABLE leases")
        drop_heads(db)
        db.execute("UPDATE actorflow_schema SET version = 2")
    with SQLiteStore(tmp_path / "s.db") as store:
        assert store.list() == [first]
        second, more = make_checkpoint(session="s", parent=first, chunks={"e": [b"shared"]})
        store.save(second, {})
        store.delete(first.id)
        assert store.verify() == []
        assert store.has_blobs(blobs) == set(more)
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        assert db.execute("SELECT version FROM actorflow_schema").fetchall() == [(5,)]
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert not names & {"checkpoints_by_workflow", "checkpoints_by_kind", "refs_by_blob"}


def test_sqlite_store_upgrades_schema_3_with_a_leases_table(tmp_path: Path) -> None:
    """A schema-3 file (no leases table) opens upgraded, its leases working."""
    with SQLiteStore(tmp_path / "s.db") as store:
        first, blobs = make_checkpoint(session="s")
        store.save(first, blobs)
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db, db:
        db.execute("DROP TABLE leases")
        drop_heads(db)
        db.execute("UPDATE actorflow_schema SET version = 3")
    with SQLiteStore(tmp_path / "s.db") as store:
        lease = store.acquire_lease("s", "test", ttl=30)
        second, _ = make_checkpoint(session="s", parent=first, chunks={})
        store.save(second, {}, lease=lease)
        assert [cp.id for cp in store.history("s")] == [second.id, first.id]
        assert store.current_lease("s") == lease
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        assert db.execute("SELECT version FROM actorflow_schema").fetchall() == [(5,)]


def test_sqlite_store_without_a_table_of_cancel_requests_gets_one_with_the_first(
    tmp_path: Path,
) -> None:
    """A file an older actorflow made (schema 5, no table of cancel requests) opens as
    it is: its leases carry no request; the first request adds the table, and the
    holder's handle sees what another handle requested; the version stays 5."""
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        first, blobs = make_checkpoint(session="s")
        store.save(first, blobs)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE cancels")
    with SQLiteStore(path) as holder, SQLiteStore(path) as other:
        lease = holder.acquire_lease("s", "holder", ttl=30)
        assert holder.current_lease("s") == lease and lease.cancel_requested is None
        assert holder.renew_lease(lease, 30).cancel_requested is None
        assert other.request_cancel("s", "run-1") is True
        noted = holder.current_lease("s")
        assert noted is not None and noted.cancel_requested == "run-1"
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT version FROM actorflow_schema").fetchall() == [(5,)]
        assert db.execute("SELECT session, run FROM cancels").fetchall() == [("s", "run-1")]


def test_every_built_in_store_carries_cancel_requests(tmp_path: Path) -> None:
    """The optional CancelRequests part of the protocol is no option for the built-in
    stores (the conformance kit skips its test for a store without it)."""
    stores: list[actorflow.storage.CheckpointStore] = [
        MemoryStore(),
        FileStore(tmp_path / "f"),
        SQLiteStore(tmp_path / "s.db"),
        actorflow.storage.StoreWrapper(MemoryStore()),
    ]
    for store in stores:
        assert isinstance(store, actorflow.storage.CancelRequests), store
        store.close()


def test_sqlite_store_refuses_memory_paths() -> None:
    """':memory:' would give each thread its own database, so it is refused."""
    with pytest.raises(ValueError, match="MemoryStore"):
        SQLiteStore(":memory:")


def test_sqlite_store_reports_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    """A file of garbage raises CheckpointCorrupt on open."""
    (tmp_path / "s.db").write_bytes(os.urandom(4096))
    with pytest.raises(CheckpointCorrupt):
        SQLiteStore(tmp_path / "s.db")


def test_sqlite_store_detects_index_columns_out_of_step(tmp_path: Path) -> None:
    """A row whose session column disagrees with its record is reported as corrupt."""
    with SQLiteStore(tmp_path / "s.db") as store:
        checkpoint, blobs = make_checkpoint(session="real")
        store.save(checkpoint, blobs)
        with sqlite3.connect(tmp_path / "s.db") as db:
            db.execute("UPDATE checkpoints SET session = 'forged'")
        db.close()
        with pytest.raises(CheckpointCorrupt, match="disagree"):
            store.list(session="forged")
        assert any(checkpoint.id in p for p in store.verify())


def test_sqlite_store_closes_connections_of_finished_threads(tmp_path: Path) -> None:
    """Threads that come and go do not leave one open connection each."""
    with SQLiteStore(tmp_path / "s.db") as store:
        checkpoint, blobs = make_checkpoint()
        store.save(checkpoint, blobs)
        for _ in range(20):
            worker = threading.Thread(target=store.load, args=(checkpoint.id,))
            worker.start()
            worker.join(timeout=30)
            assert not worker.is_alive()
        assert len(store._connections._conns) <= 2


def test_kit_skips_damage_tests_for_factories_without_hooks(tmp_path: Path) -> None:
    """A factory without corrupt_* hooks gets a skip with the reason, not a failure."""
    from actorflow.storage.conformance._base import damage_hook

    def plain_factory() -> FileStore:
        return FileStore(tmp_path / "s")

    with pytest.raises(pytest.skip.Exception, match="corrupt_record"):
        damage_hook(plain_factory, "corrupt_record")


@pytest.mark.parametrize("name", ["file", "sqlite"])
def test_load_blobs_reads_many_verified_and_refuses_what_is_missing(
    name: str, tmp_path: Path
) -> None:
    """load_blobs returns every requested blob verified; a missing one raises, never a partial answer."""
    with OPENERS[name](tmp_path) as store:
        assert isinstance(store, actorflow.storage.BlobBatchReader)
        chunks = [f"chunk {i}".encode() * 50 for i in range(20)]
        checkpoint, blobs = make_checkpoint(chunks={"e": chunks})
        store.save(checkpoint, blobs)
        got = store.load_blobs(list(blobs) * 2)
        assert got == blobs
        missing = actorflow.storage.blob_digest(b"never stored")
        with pytest.raises(CheckpointError, match="no blob"):
            store.load_blobs([*blobs, missing])


@pytest.mark.parametrize("name", sorted(OPENERS))
def test_history_of_a_session_is_the_lineage_of_its_latest(name: str, tmp_path: Path) -> None:
    """store.history(session) lists the session's lineage newest first; an unknown name raises."""
    with OPENERS[name](tmp_path) as store:
        first, blobs = make_checkpoint(session="s")
        store.save(first, blobs)
        second, blobs = make_checkpoint(session="s", parent=first)
        store.save(second, blobs)
        assert [cp.id for cp in store.history("s")] == [second.id, first.id]
        with pytest.raises(actorflow.errors.CheckpointNotFound):
            store.history("no-such-session")


def test_memory_store_counts_references_of_records_naming_the_same_blobs() -> None:
    """Records saved one after another, some naming the same blobs as the one before,
    each count their own references: deleting them collects exactly the unused blobs."""
    store = MemoryStore()
    one, two = [b"one"], [b"two"]
    saved = []
    for chunks in ({"a": one}, {"a": one}, {"a": two}, {"a": one, "b": two}, {"a": one}):
        checkpoint, blobs = make_checkpoint(chunks=chunks)
        store.save(checkpoint, blobs)
        saved.append(checkpoint)
        assert {d: store.load_blob(d) for d in checkpoint.blob_digests()} == blobs
    d1, d2 = (actorflow.storage.blob_digest(c[0]) for c in (one, two))
    for checkpoint, left in zip(saved, [{d1, d2}, {d1, d2}, {d1, d2}, {d1}, set()], strict=True):
        store.delete(checkpoint.id)
        assert store.has_blobs([d1, d2]) == left
        assert store.verify() == []
