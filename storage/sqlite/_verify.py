"""SQLiteStore's verify: every check of a store's file, reported one line each.

:class:`SQLiteVerify` owns one concern of :class:`~._store.SQLiteStore`, on the
store's connections: finding damage (SQLite's own integrity check, records that do not decode,
references that disagree with the records, missing parents and blobs) without
raising on it.
"""

from __future__ import annotations

import builtins

from actorflow.errors import CheckpointCorrupt, UnsupportedFormat

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
            rows = db.execute(f"SELECT {sql.COLUMNS}, parent_id FROM checkpoints ORDER BY id")
            for row in rows:
                checkpoint_id, parent = str(row[0]), row[5]
                try:
                    cp = sql.decode_row(row[:5])
                    if cp.blob_digests() != refs.get(checkpoint_id, set()):
                        problems.append(
                            f"checkpoint {checkpoint_id}: its blob references disagree "
                            "with the refs table"
                        )
                except (CheckpointCorrupt, UnsupportedFormat) as exc:
                    problems.append(str(exc))
                if parent is not None and parent not in stored and parent not in deleted:
                    problems.append(f"checkpoint {checkpoint_id}: parent {parent} was never stored")
                for digest in sorted(refs.get(checkpoint_id, ())):
                    if digest not in states:
                        states[digest] = sql.blob_state(db, digest)
                    if states[digest] != "ok":
                        problems.append(
                            f"checkpoint {checkpoint_id}: blob {digest} is {states[digest]}"
                        )
