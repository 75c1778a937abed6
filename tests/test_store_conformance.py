"""The conformance kit, run on each built-in store."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorflow.storage.conformance import (
    FileStoreFactory,
    MemoryStoreFactory,
    SQLiteStoreFactory,
    StoreConformance,
    StoreFactory,
)


class TestMemoryStore(StoreConformance):
    """MemoryStore passes the kit (reopen and multi-process tests do not apply)."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        """One MemoryStore per test."""
        return MemoryStoreFactory()


class TestFileStore(StoreConformance):
    """FileStore passes the kit."""

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        """A FileStore in a fresh folder."""
        return FileStoreFactory(str(tmp_path / "store"))


class TestSQLiteStore(StoreConformance):
    """SQLiteStore passes the kit."""

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        """A SQLiteStore in a fresh file."""
        return SQLiteStoreFactory(str(tmp_path / "checkpoints.db"))
