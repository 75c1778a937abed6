"""PostgresStore: checkpoints in a PostgreSQL database, for services on several hosts.

Requires the ``actorflow[postgres]`` extra (psycopg 3 and psycopg_pool): importing
this package imports psycopg, so ``actorflow.storage`` imports it only when
``PostgresStore`` is first used, and ``import actorflow`` never does.

The store (``_store``) holds the protocol's record and blob methods and is composed
of collaborators that each own their state: its connections (``_pool``, run with
retries by ``_store.Connections``), its session leases (``_leases``) and its
verification (``_verify``). ``_schema`` creates and upgrades the tables, ``_sql``
is the SQL only PostgreSQL runs; what it shares with SQLiteStore is in
``actorflow.storage._sql``.
"""

from ._sql import Statements
from ._store import PostgresStore

__all__ = ["PostgresStore", "Statements"]
