"""Opening a store with ``create=False``: an existing actorflow store opens, anything
else is StoreNotFound, and nothing is created or changed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import actorflow as af
from actorflow.storage.conformance import make_checkpoint
from tests.support import pg


def test_sqlite_without_create_refuses_a_missing_file_and_creates_nothing(tmp_path: Path) -> None:
    """A mistyped path: StoreNotFound naming it; no file (nor -wal, -shm) appears."""
    missing = tmp_path / "runs.db"
    with pytest.raises(af.StoreNotFound, match="no such file"):
        af.SQLiteStore(missing, create=False)
    assert list(tmp_path.iterdir()) == []


def test_sqlite_without_create_leaves_a_foreign_database_as_it_was(tmp_path: Path) -> None:
    """Another program's SQLite file: StoreNotFound, its bytes unchanged, no tables added."""
    other = tmp_path / "notes.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    db.close()
    before = other.read_bytes()
    with pytest.raises(af.StoreNotFound, match="no actorflow tables"):
        af.SQLiteStore(other, create=False)
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_sqlite_without_create_opens_an_existing_store(tmp_path: Path) -> None:
    """A store that exists opens as usual and reads what was saved."""
    path = tmp_path / "runs.db"
    with af.SQLiteStore(path) as store:
        store.save(*make_checkpoint(session="s"))
    with af.SQLiteStore(path, create=False) as store:
        assert [cp.session for cp in store.list()] == ["s"]


def test_filestore_without_create_refuses_a_missing_or_foreign_folder(tmp_path: Path) -> None:
    """No folder, or a folder without the marker: StoreNotFound; nothing is created."""
    with pytest.raises(af.StoreNotFound, match="no such folder"):
        af.FileStore(tmp_path / "runs", create=False)
    assert not (tmp_path / "runs").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(af.StoreNotFound, match="no actorflow-store marker"):
        af.FileStore(empty, create=False)
    assert list(empty.iterdir()) == []


def test_filestore_without_create_opens_an_existing_store(tmp_path: Path) -> None:
    """A FileStore folder opens as usual."""
    with af.FileStore(tmp_path / "runs") as store:
        store.save(*make_checkpoint(session="s"))
    with af.FileStore(tmp_path / "runs", create=False) as store:
        assert [cp.session for cp in store.list()] == ["s"]


def _schema_exists(dsn: str, schema: str) -> bool:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone()
    return row is not None and row[0] is not None


def test_postgres_without_create_refuses_a_missing_schema_and_creates_nothing() -> None:
    """A mistyped schema: StoreNotFound naming it; no schema or table is created."""
    dsn = pg.dsn()
    schema = pg.new_schema()
    try:
        with pytest.raises(af.StoreNotFound, match=f"no schema '{schema}'"):
            af.PostgresStore(dsn, schema=schema, create=False)
        assert not _schema_exists(dsn, schema)
    finally:
        pg.drop_schema(dsn, schema)


def test_postgres_without_create_opens_an_existing_schema() -> None:
    """A schema actorflow made opens as usual."""
    with pg.schema() as (dsn, schema):
        store = af.PostgresStore(dsn, schema=schema)
        store.save(*make_checkpoint(session="s"))
        store.close()
        store = af.PostgresStore(dsn, schema=schema, create=False)
        try:
            assert [cp.session for cp in store.list()] == ["s"]
        finally:
            store.close()
