"""The conformance kit: one pytest suite that every CheckpointStore passes.

Requires pytest (a test dependency, never a runtime one of actorflow). A backend,
built-in or third-party, is certified by one subclass and one fixture::

    import pytest
    from actorflow.storage.conformance import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return MyStoreFactory(str(tmp_path / "db"))

The factory (see :class:`StoreFactory`) opens the same store again on each call.
Optional capabilities switch on more tests; without them those tests are skipped
with the reason shown. ``docs/storage.md`` explains each one. Session leases are
not optional: a store without them fails every lease test.

The kit's modules are named by the property each checks: ``_contract`` (what
every single-threaded caller relies on, and the optional cut fast path),
``_leases``, ``_retention``, ``_damage``, ``_concurrency`` (threads, processes,
shared handles, close under load) and ``_history`` (a session's history entries,
stored with their records, crashes included), on the fixtures of ``_base``; ``_factories``
holds the built-in stores' factories. Each property's test class is exported, so
a store can run one property alone.
"""

from __future__ import annotations

from actorflow.errors import MissingExtra

try:
    import pytest  # noqa: F401 - the kit's modules need it; say what to install before they do
except ImportError:
    raise MissingExtra("actorflow.storage.conformance (a pytest suite)", "test", "pytest") from None

from ._base import StoreFactory, make_checkpoint
from ._concurrency import ConcurrencyTests
from ._contract import ContractTests
from ._damage import DamageTests
from ._factories import (
    FileStoreFactory,
    MemoryStoreFactory,
    PostgresStoreFactory,
    SQLiteStoreFactory,
)
from ._history import HistoryTests
from ._leases import LeaseTests
from ._retention import RetentionTests

__all__ = [
    "ConcurrencyTests",
    "ContractTests",
    "DamageTests",
    "FileStoreFactory",
    "HistoryTests",
    "LeaseTests",
    "MemoryStoreFactory",
    "PostgresStoreFactory",
    "RetentionTests",
    "SQLiteStoreFactory",
    "StoreConformance",
    "StoreFactory",
    "make_checkpoint",
]


class StoreConformance(
    ContractTests, ConcurrencyTests, LeaseTests, RetentionTests, DamageTests, HistoryTests
):
    """The whole kit. Subclass it in a ``Test*`` class and override ``store_factory``.

    Tests are named by the property they check. Those needing a capability the
    factory lacks (``durable``, ``multiprocess``, ``corrupt_record``,
    ``corrupt_blob``, ``corrupt_header``, ``corrupt_column``) are skipped with the reason.
    """
