"""PostgresStore's verify: every check of a store's schema, reported one line each.

:class:`PostgresVerify` owns one concern of :class:`~._store.PostgresStore`, on
the store's connections: finding damage (records that do not decode, references that disagree
with the records, missing parents, missing or corrupt blobs) in one consistent
snapshot, without raising on it.
"""

from __future__ import annotations

import builtins
from typing import Any

import psycopg

from actorflow.storage._sql import COLUMNS, blob_state, verify_rows

from ._pool import PostgresConnections
from ._sql import Statements

__all__ = ["PostgresVerify"]

Conn = psycopg.Connection[Any]


class PostgresVerify:
    """Verify for PostgresStore, on its connections."""

    def __init__(self, connections: PostgresConnections, q: Statements) -> None:
        self._sql = q
        self._run = connections.run

    def verify(self) -> builtins.list[str]:
        """Every problem found in the store, one line each; [] when healthy."""
        q = self._sql

        def run(db: Conn) -> builtins.list[str]:
            problems: builtins.list[str] = []
            with db.transaction():
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                stored = {r[0] for r in db.execute(q("SELECT id FROM {s}.checkpoints"))}
                deleted = {r[0] for r in db.execute(q("SELECT id FROM {s}.deleted"))}
                blobs: dict[int, tuple[str, str]] = {}
                for blob_id, digest, data in db.execute(
                    q("SELECT id, digest, data FROM {s}.blobs")
                ):
                    blobs[blob_id] = (digest, blob_state(digest, data))
                rows = db.execute(
                    q(f"SELECT {COLUMNS}, parent_id, blob_ids FROM {{s}}.checkpoints ORDER BY id")
                )
                problems += verify_rows(
                    rows,
                    stored=stored,
                    deleted=deleted,
                    references=lambda row: {
                        blobs[b][0] if b in blobs else f"<missing blob #{b}>"
                        for b in row[6]
                        if b is not None
                    },
                    blobs=lambda row: [
                        blobs.get(b, (f"#{b}", "missing"))
                        for b in sorted(b for b in row[6] if b is not None)
                    ],
                    disagree="its blob_ids",
                    damaged=_nulls,
                )
            return problems

        found: builtins.list[str] = self._run(run, what="verify")
        return found


def _nulls(row: tuple[Any, ...]) -> builtins.list[str]:
    """The problem of a row whose ``blob_ids`` hold NULL (the column is NOT NULL, its
    items are not)."""
    if None not in row[6]:
        return []
    return [
        f"checkpoint {row[0]}: its blob_ids hold NULL; restore the row from a backup,"
        " or delete the checkpoint"
    ]
