"""SQLiteStore's verify: every check of a store's file, reported one line each.

:class:`SQLiteVerify` owns one concern of :class:`~._store.SQLiteStore`, on the
store's connections: finding damage (SQLite's own integrity check, records that do not decode,
references that disagree with the records, missing parents and blobs) without
raising on it.
"""

from __future__ import annotations

import builtins

from actorflow.errors import CheckpointCorrupt
from actorflow.storage._sql import COLUMNS, verify_rows

from . import _sql as sql
from ._connections import SQLiteConnections

__all__ = ["SQLiteVerify"]


class SQLiteVerify:
    """Verify for SQLiteStore, on its connections."""

    def __init__(self, connections: SQLiteConnections) -> None:
        self._connections = connections

    def verify(self) -> builtins.list[str]:
        """Every problem found in the store, one line each; [] when healthy.

        A file too damaged for the checks to finish gives the problem that
        stopped them (with those found before it), rather than raising.
        """
        problems: builtins.list[str] = []
        try:
            self._verify(problems)
        except CheckpointCorrupt as exc:
            problems.append(str(exc))
        return problems

    def _verify(self, problems: builtins.list[str]) -> None:
        states: dict[str, str] = {}
        with self._connections.read() as db:
            # integrity_check, not quick_check: only it compares every index with
            # the table, and a damaged index can make latest() give an older record.
            problems += [
                f"database: {r[0]}" for r in db.execute("PRAGMA integrity_check") if r[0] != "ok"
            ]
            stored = {r[0] for r in db.execute("SELECT id FROM checkpoints")}
            deleted = {r[0] for r in db.execute("SELECT id FROM deleted")}
            refs: dict[str, set[str]] = {}
            for checkpoint_id, blob, digest in db.execute(
                "SELECT c.id, r.blob, b.digest FROM refs r JOIN checkpoints c ON c.rowid ="
                " r.checkpoint LEFT JOIN blobs b ON b.id = r.blob"
            ):
                named = digest if type(digest) is str else f"<missing blob #{blob}>"
                if digest is not None and type(digest) is not str:
                    problems.append(f"checkpoint {checkpoint_id}: blob #{blob} has no text digest")
                refs.setdefault(str(checkpoint_id), set()).add(named)
            rows = db.execute(f"SELECT {COLUMNS}, parent_id FROM checkpoints ORDER BY id")

            def state(digest: str) -> str:
                if digest not in states:
                    states[digest] = sql.blob_state(db, digest)
                return states[digest]

            problems += verify_rows(
                rows,
                stored=stored,
                deleted=deleted,
                references=lambda row: refs.get(str(row[0]), set()),
                blobs=lambda row: [(d, state(d)) for d in sorted(refs.get(str(row[0]), ()))],
                disagree="the refs table",
            )
