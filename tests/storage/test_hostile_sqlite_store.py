"""A damaged SQLite store file: reported as an actorflow error, never a stall or a silent rollback."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from actorflow.errors import CheckpointCorrupt, CheckpointError
from actorflow.storage import Checkpoint, SQLiteStore
from actorflow.storage.conformance import make_checkpoint
from fuzz.index_sweep import reads


def _build(path: Path, steps: int = 12) -> list[Checkpoint]:
    store = SQLiteStore(path)
    saved: list[Checkpoint] = []
    parent = None
    for _ in range(steps):
        for session in ("a", "b"):
            cp, blobs = make_checkpoint(session=session, parent=parent if session == "a" else None)
            store.save(cp, blobs)
            if session == "a":
                saved.append(cp)
                parent = cp
    # Everything in the main file: the WAL folded in, so flipping the file flips the data.
    store._connections.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return saved


def _flipped(base: Path, work: Path, offset: int, bit: int) -> Path:
    data = bytearray(base.read_bytes())
    data[offset] ^= 1 << bit
    for suffix in ("", "-wal", "-shm"):
        Path(f"{work}{suffix}").unlink(missing_ok=True)
    work.write_bytes(bytes(data))
    return work


def test_damaged_header_is_corrupt_at_once(tmp_path: Path) -> None:
    """Every bit flip of the 100-byte header: opening, latest and verify end in an actorflow
    error or work; none waits out the 30 s busy timeout (the whole test runs under 60 s)."""
    base = tmp_path / "base.db"
    _build(base, steps=2)
    seen: set[str] = set()
    for offset in range(100):
        for bit in (0, 3, 7):
            path = _flipped(base, tmp_path / "t.db", offset, bit)
            try:
                store = SQLiteStore(path)
                try:
                    store.latest(session="a")
                    store.verify()
                finally:
                    store.close()
            except CheckpointError as exc:
                seen.add(type(exc).__name__)
    assert "CheckpointCorrupt" in seen
    # The schema-format byte: "unsupported file format", which used to be retried for 30 s.
    path = _flipped(base, tmp_path / "t.db", 47, 0)
    with pytest.raises(CheckpointCorrupt, match="damaged"):
        SQLiteStore(path)


def _index_page(path: Path, name: str) -> tuple[int, int]:
    """Byte offset and size of an index's root page."""
    with sqlite3.connect(path) as db:
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)
        ).fetchone()
        (size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    return (root - 1) * size, size


@pytest.mark.parametrize(
    "index", ["checkpoints_by_session", "sqlite_autoindex_checkpoints_1", "heads"]
)
def test_index_damage_is_never_a_silent_rollback(tmp_path: Path, index: str) -> None:
    """Bit flips in an index page (or the heads table's, what the session index is
    checked against): latest() gives the true latest or raises, list() of the session
    gives all of it or raises, and whenever one did not answer, verify() reports the
    damage."""
    base = tmp_path / "base.db"
    saved = _build(base)
    start, size = _index_page(base, index)
    content = base.read_bytes()[start : start + size]
    # The cells sit at the end of the page; flip bits of every used byte after the header.
    used = [i for i in range(12, size) if content[i]]
    for i in used[::2]:
        for bit in (0, 5):
            path = _flipped(base, tmp_path / "t.db", start + i, bit)
            try:
                store = SQLiteStore(path)
            except CheckpointCorrupt:
                continue
            expected = (saved[-1].id, None, [cp.id for cp in saved])  # None: not checked
            try:
                refused = False
                for read, want in zip(reads(store), expected, strict=True):
                    try:
                        got = read()
                    except CheckpointCorrupt:
                        refused = True
                    else:
                        assert want is None or got == want, (i, bit)
                if refused:
                    assert store.verify() != [], (i, bit)
            finally:
                store.close()
    assert used


def test_verify_finds_index_damage_quick_check_misses(tmp_path: Path) -> None:
    """An index entry pointing at the wrong row is found by verify() (integrity_check)."""
    base = tmp_path / "base.db"
    saved = _build(base, steps=4)
    with sqlite3.connect(base) as db:
        db.execute("PRAGMA writable_schema = ON")
    start, size = _index_page(base, "checkpoints_by_session")
    data = bytearray(base.read_bytes())
    # Rename the newest record of session "a" in the index only: "a" -> "b".
    needle = b"a" + saved[-1].id.encode()
    at = data.index(needle, start, start + size)
    data[at : at + 1] = b"b"
    base.write_bytes(bytes(data))
    store = SQLiteStore(base)
    with sqlite3.connect(base) as db:
        assert db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    db.close()
    problems = store.verify()
    assert any("database" in p for p in problems), problems
    with pytest.raises(CheckpointCorrupt, match="damaged"):
        store.latest(session="a")
    store.close()


def test_blob_digest_that_is_not_text_is_a_problem(tmp_path: Path) -> None:
    """verify() reports a blob row whose digest is a blob, instead of raising TypeError."""
    path = tmp_path / "s.db"
    saved = _build(path, steps=2)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE blobs SET digest = CAST(digest AS BLOB)")
    db.close()
    store = SQLiteStore(path)
    problems = store.verify()
    assert any("no text digest" in p for p in problems), problems
    with pytest.raises(CheckpointError):  # not found under its digest
        store.load_blobs(saved[-1].blob_digests())
    store.close()


def test_schema_text_that_is_not_utf8_is_corrupt(tmp_path: Path) -> None:
    """A damaged schema page whose text is not UTF-8 makes SQLiteStore() raise CheckpointCorrupt."""
    base = tmp_path / "base.db"
    _build(base, steps=1)
    data = bytearray(base.read_bytes())
    at = data.index(b"CREATE TABLE checkpoints")
    data[at + 7] = 0xFF  # inside the schema's SQL text on page 1
    target = tmp_path / "t.db"
    target.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorrupt):
        SQLiteStore(target)
    shutil.rmtree(tmp_path / "unused", ignore_errors=True)


def test_only_busy_errors_are_retried(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Switching to WAL retries "database is locked" alone: a read-only file fails at once."""
    from actorflow.storage.sqlite import _sql as sql

    calls: list[str] = []

    class Refusing:
        def execute(self, statement: str) -> object:
            calls.append(statement)
            exc = sqlite3.OperationalError("attempt to write a readonly database")
            exc.sqlite_errorcode = sqlite3.SQLITE_READONLY
            raise exc

    store = SQLiteStore(tmp_path / "s.db")
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            sql.enable_wal(Refusing(), store.path)  # type: ignore[arg-type]
        assert len(calls) == 1
        busy = sqlite3.OperationalError("database is locked")
        busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
        assert sql.is_busy(busy)
    finally:
        store.close()


def test_read_only_mount_fails_at_once_naming_the_cause(tmp_path: Path) -> None:
    """On a real read-only bind mount, SQLiteStore() raises CheckpointError without waiting."""
    import os
    import subprocess

    source, mount = tmp_path / "src", tmp_path / "ro"
    source.mkdir()
    mount.mkdir()
    _build(source / "s.db", steps=1)
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    bind = subprocess.run(
        ["mount", "--bind", str(source), str(mount)], check=False, capture_output=True
    )
    if bind.returncode != 0:
        pytest.skip(f"mount is not permitted here: {bind.stderr!r}")
    try:
        subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(mount)], check=True, capture_output=True
        )
        with pytest.raises(CheckpointError, match="read-only file system"):
            SQLiteStore(mount / "s.db")
    finally:
        subprocess.run(["umount", str(mount)], check=False, capture_output=True)
