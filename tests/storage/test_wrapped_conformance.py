"""The conformance kit, run on wrapped stores: a pass-through StoreWrapper and an
EncryptedStore over every built-in store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actorflow.storage.conformance import (
    FileStoreFactory,
    MemoryStoreFactory,
    PostgresStoreFactory,
    SQLiteStoreFactory,
    StoreConformance,
    StoreFactory,
)
from tests.support import pg
from tests.support.wrapped_stores import EncryptedFactory, PassThroughFactory

NOT_COLLECTED: Any = None
"""Set on a kit test that does not apply to a store (see test_store_conformance)."""


class _InMemory(StoreConformance):
    """What does not apply to a MemoryStore does not apply to a wrapper of one."""

    test_concurrent_processes_lose_nothing = NOT_COLLECTED
    test_data_survives_close_and_reopen = NOT_COLLECTED
    test_two_processes_race_one_wins = NOT_COLLECTED
    test_sigkilled_owner_is_taken_over_after_the_ttl = NOT_COLLECTED
    test_concurrent_saves_prunes_and_verify_processes = NOT_COLLECTED
    test_writer_killed_mid_save_leaves_the_previous_cut = NOT_COLLECTED
    test_second_handle_sees_saves = NOT_COLLECTED
    test_damaged_header_is_reported = NOT_COLLECTED
    test_a_row_disagreeing_with_its_record_is_never_skipped = NOT_COLLECTED
    test_a_damaged_row_inside_a_lineage_is_never_left_out_of_a_list = NOT_COLLECTED


class _InFiles(StoreConformance):
    """A FileStore record is its own index: no row columns to damage."""

    test_a_row_disagreeing_with_its_record_is_never_skipped = NOT_COLLECTED
    test_a_damaged_row_inside_a_lineage_is_never_left_out_of_a_list = NOT_COLLECTED


class TestWrappedMemoryStore(_InMemory):
    """A pass-through StoreWrapper of a MemoryStore passes the kit."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        """A wrapper of one MemoryStore per test."""
        return PassThroughFactory(MemoryStoreFactory())


class TestWrappedFileStore(_InFiles):
    """A pass-through StoreWrapper of a FileStore passes the kit."""

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        """A wrapper of a FileStore in a fresh folder."""
        return PassThroughFactory(FileStoreFactory(str(tmp_path / "store")))


class TestWrappedSQLiteStore(StoreConformance):
    """A pass-through StoreWrapper of a SQLiteStore passes the kit."""

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        """A wrapper of a SQLiteStore in a fresh file."""
        return PassThroughFactory(SQLiteStoreFactory(str(tmp_path / "checkpoints.db")))


class TestWrappedPostgresStore(StoreConformance):
    """A pass-through StoreWrapper of a PostgresStore passes the kit."""

    @pytest.fixture
    def store_factory(self) -> Iterator[StoreFactory]:
        """A wrapper of a PostgresStore on a schema of its own."""
        with pg.schema() as (dsn, schema):
            yield PassThroughFactory(PostgresStoreFactory(dsn, schema))


class TestEncryptedMemoryStore(_InMemory):
    """An EncryptedStore over a MemoryStore passes the kit."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        """An EncryptedStore over one MemoryStore per test."""
        return EncryptedFactory(MemoryStoreFactory())


class TestEncryptedFileStore(_InFiles):
    """An EncryptedStore over a FileStore passes the kit."""

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        """An EncryptedStore over a FileStore in a fresh folder."""
        return EncryptedFactory(FileStoreFactory(str(tmp_path / "store")))


class TestEncryptedSQLiteStore(StoreConformance):
    """An EncryptedStore over a SQLiteStore passes the kit."""

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        """An EncryptedStore over a SQLiteStore in a fresh file."""
        return EncryptedFactory(SQLiteStoreFactory(str(tmp_path / "checkpoints.db")))


class TestEncryptedPostgresStore(StoreConformance):
    """An EncryptedStore over a PostgresStore passes the kit."""

    @pytest.fixture
    def store_factory(self) -> Iterator[StoreFactory]:
        """An EncryptedStore over a PostgresStore on a schema of its own."""
        with pg.schema() as (dsn, schema):
            yield EncryptedFactory(PostgresStoreFactory(dsn, schema))
