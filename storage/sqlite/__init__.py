"""SQLiteStore: checkpoints in one SQLite file, the embedded default for services.

The store (``_store``) holds the schema and the protocol's record and blob methods,
and is composed of collaborators that each own their state: its per-thread
connections and transactions (``_connections``, with the WAL checkpointer of
``_wal``), its session leases (``_leases``) and its verification (``_verify``).
``_sql`` is the schema and the SQL only SQLite runs; what it shares with
PostgresStore is in ``actorflow.storage._sql``.
"""

from ._store import SQLiteStore

__all__ = ["SQLiteStore"]
