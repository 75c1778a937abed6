"""The conformance kit, run on each built-in store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actorflow.errors import CheckpointError
from actorflow.storage import MemoryStore
from actorflow.storage.conformance import (
    FileStoreFactory,
    LeaseTests,
    MemoryStoreFactory,
    PostgresStoreFactory,
    SQLiteStoreFactory,
    StoreConformance,
    StoreFactory,
)
from tests.support import pg

NOT_COLLECTED: Any = None
"""Set on a kit test that does not apply to a store: pytest collects only callables, so the
test does not exist for that store (rather than being collected and skipped)."""


class TestMemoryStore(StoreConformance):
    """MemoryStore passes the kit (reopen and multi-process tests do not apply)."""

    # Memory lives in one object of one process: the reopen and multi-process tests
    # do not apply, so they are not collected for it (rather than collected and skipped).
    test_concurrent_processes_lose_nothing = NOT_COLLECTED
    test_data_survives_close_and_reopen = NOT_COLLECTED
    test_two_processes_race_one_wins = NOT_COLLECTED
    test_sigkilled_owner_is_taken_over_after_the_ttl = NOT_COLLECTED
    test_concurrent_saves_prunes_and_verify_processes = NOT_COLLECTED
    test_writer_killed_mid_save_leaves_the_previous_cut = NOT_COLLECTED
    # One object is the whole store: there is no second handle, and no header, to test.
    test_second_handle_sees_saves = NOT_COLLECTED
    test_damaged_header_is_reported = NOT_COLLECTED
    # Records are kept whole, with no index columns beside them to disagree.
    test_a_row_disagreeing_with_its_record_is_never_skipped = NOT_COLLECTED
    test_a_damaged_row_inside_a_lineage_is_never_left_out_of_a_list = NOT_COLLECTED

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        """One MemoryStore per test."""
        return MemoryStoreFactory()

    def test_closing_ends_the_data(self, store_factory: StoreFactory) -> None:
        """A MemoryStore is not durable: once closed, using it raises CheckpointError."""
        store = store_factory()
        store.close()
        with pytest.raises(CheckpointError, match="closed"):
            store.list()


class TestFileStore(StoreConformance):
    """FileStore passes the kit."""

    # A record is its own index (its pack names it): no columns beside it to disagree.
    test_a_row_disagreeing_with_its_record_is_never_skipped = NOT_COLLECTED
    test_a_damaged_row_inside_a_lineage_is_never_left_out_of_a_list = NOT_COLLECTED

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


class TestPostgresStore(StoreConformance):
    """PostgresStore passes the kit, on a fresh schema of the test server per test."""

    @pytest.fixture
    def store_factory(self) -> Iterator[StoreFactory]:
        """A PostgresStore on a schema of its own, dropped after the test."""
        with pg.schema() as (dsn, schema):
            yield PostgresStoreFactory(dsn, schema)


class _NoLeases:
    """A store front that lacks the lease methods (a third-party store written before them)."""

    def __init__(self) -> None:
        self._inner = MemoryStore()

    def __getattr__(self, name: str) -> object:
        if name.endswith("_lease"):
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.mark.parametrize("test", [t for t in dir(LeaseTests) if t.startswith("test_")])
def test_a_store_without_leases_fails_the_lease_kit(test: str) -> None:
    """Every lease test of the kit fails (never skips) on a store without leases."""
    store = _NoLeases()
    method = getattr(LeaseTests(), test)
    args = [store] if method.__code__.co_argcount == 2 else [store, MemoryStoreFactory()]
    with pytest.raises(pytest.fail.Exception, match="does not implement session leases"):
        method(*args)
