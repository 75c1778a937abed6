"""Every single-bit flip of a SQLite store's session index page and of its heads table's
(what that index's answers are checked against): ``python -m fuzz.index_sweep``.

For each flip it asks ``latest(session=...)``, ``latest()`` and ``list(session=...)``
and counts the answers that are wrong without an error (a silent rollback: must be 0) and the
flips after which some answer is wrong or refused while ``verify()`` reports
nothing (must be 0).
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from actorflow.errors import CheckpointError
from actorflow.storage import Checkpoint, SQLiteStore
from actorflow.storage.conformance import make_checkpoint

__all__ = ["main", "reads"]


def _build(path: Path) -> tuple[list[str], str]:
    """Session "a" (a lineage of 12) between 12 sessions "b": a's ids, and the newest id."""
    store = SQLiteStore(path)
    parent = None
    lineage: list[str] = []
    for _ in range(12):
        for session in ("a", "b"):
            cp, blobs = make_checkpoint(session=session, parent=parent if session == "a" else None)
            store.save(cp, blobs)
            if session == "a":
                parent = cp
                lineage.append(cp.id)
            last = cp.id
    store._connections.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return lineage, last


def _id(checkpoint: Checkpoint | None) -> str | None:
    return None if checkpoint is None else checkpoint.id


def reads(store: SQLiteStore) -> list[Callable[[], object]]:
    """``latest(session="a")``, ``latest()`` and ``list(session="a")``, as ids (the
    reads a damaged index must never answer wrongly; also used by the hostile-file test)."""
    return [
        lambda: _id(store.latest(session="a")),
        lambda: _id(store.latest()),
        lambda: [cp.id for cp in store.list(session="a")],
    ]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.db"
        lineage_a, newest = _build(base)
        with sqlite3.connect(base) as db:
            (size,) = db.execute("PRAGMA page_size").fetchone()
            roots = db.execute(
                "SELECT name, rootpage FROM sqlite_master"
                " WHERE name IN ('checkpoints_by_session', 'heads')"
            ).fetchall()
        db.close()
        data = base.read_bytes()
        flips = silent = missed = refused = 0
        for name, root in roots:
            start = (root - 1) * size
            for offset in range(start, start + size):
                for bit in range(8):
                    damaged = bytearray(data)
                    damaged[offset] ^= 1 << bit
                    path = Path(tmp) / "t.db"
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{path}{suffix}").unlink(missing_ok=True)
                    path.write_bytes(bytes(damaged))
                    flips += 1
                    wrong = False
                    try:
                        store = SQLiteStore(path)
                    except CheckpointError:
                        refused += 1
                        continue
                    try:
                        expected_answers = (lineage_a[-1], newest, lineage_a)
                        for read, expected in zip(reads(store), expected_answers, strict=True):
                            try:
                                got = read()
                            except CheckpointError:
                                wrong = True
                                continue
                            if got != expected:
                                silent += 1
                                wrong = True
                        if wrong:
                            refused += 1
                            if store.verify() == []:
                                missed += 1
                    finally:
                        store.close()
            print(f"{name}: done", file=sys.stderr)
    print(
        f"{flips} single-bit flips of {len(roots)} pages: {refused} refused (CheckpointError),"
        f" {silent} silently wrong answers, {missed} missed by verify()"
    )
    return 1 if silent or missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
