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

from actorflow.errors import CheckpointCorrupt, UnsupportedFormat

from . import _sql as sql
from ._pool import PostgresConnections
from ._sql import COLUMNS, Statements

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
                    blobs[blob_id] = (digest, sql.blob_state(digest, data))
                rows = db.execute(
                    q(f"SELECT {COLUMNS}, parent_id, blob_ids FROM {{s}}.checkpoints ORDER BY id")
                )
                for row in rows:
                    checkpoint_id, parent, listed = row[0], row[5], row[6]
                    blob_ids = [b for b in listed if b is not None]
                    if len(blob_ids) != len(listed):  # the column is NOT NULL, its items are not
                        problems.append(
                            f"checkpoint {checkpoint_id}: its blob_ids hold NULL; restore the"
                            " row from a backup, or delete the checkpoint"
                        )
                    named = {
                        blobs[b][0] if b in blobs else f"<missing blob #{b}>" for b in blob_ids
                    }
                    try:
                        cp = sql.decode_row(row[:5])
                        if cp.blob_digests() != named:
                            problems.append(
                                f"checkpoint {checkpoint_id}: its blob references disagree "
                                "with its blob_ids"
                            )
                    except (CheckpointCorrupt, UnsupportedFormat) as exc:
                        problems.append(str(exc))
                    if parent is not None and parent not in stored and parent not in deleted:
                        problems.append(
                            f"checkpoint {checkpoint_id}: parent {parent} was never stored"
                        )
                    for blob_id in sorted(blob_ids):
                        digest, state = blobs.get(blob_id, (f"#{blob_id}", "missing"))
                        if state != "ok":
                            problems.append(f"checkpoint {checkpoint_id}: blob {digest} is {state}")
            return problems

        found: builtins.list[str] = self._run(run, what="verify")
        return found
