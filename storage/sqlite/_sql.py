"""SQLiteStore's schema and the SQL it runs, apart from the connection and transaction logic."""

from __future__ import annotations

import builtins
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from actorflow.errors import CheckpointCorrupt, CheckpointError
from actorflow.storage._lease import LeaseRow
from actorflow.storage._sql import COLUMNS
from actorflow.storage._sql import blob_state as _state_of

SCHEMA_VERSION = 5
BUSY_TIMEOUT_S = 30.0
# The page size of new files (SQLite's default is 4096; a file keeps the size it was
# made with). A save rewrites ~10 b-tree pages (page 1, a leaf of each table and
# index it inserts into) to change a few hundred bytes in each: at 2 KB a W3 save
# appends ~35 KB to the WAL instead of ~50 KB, so the log fills, and is checkpointed
# (a database fsync), ~30% less often; and the file is ~90 KB smaller (less of each
# page left unused). 1 KB pages save more bytes but cost more frames and syscalls
# per save, and more page reads per blob on resume.
PAGE_SIZE = 2048
# Each index is one more page written (and fsynced through the WAL) per save, so only
# the indexes that a hot path needs exist: records by id (the primary key) and by
# session (``latest(session=...)`` on resume). Filters by workflow or kind alone scan
# the table, which is fine: ``list`` decodes every row it returns anyway. ``refs``
# has no index by blob: collection finds the still-referenced candidates in one
# scan per delete instead, which costs far less than that index did on every save
# (it was written at ~one page per referenced blob, scattered: 13 of W3's 20 pages).
SCHEMA = """
CREATE TABLE checkpoints (
    id         TEXT PRIMARY KEY,
    session    TEXT NOT NULL,
    workflow   TEXT NOT NULL,
    kind       TEXT NOT NULL,
    superstep  INTEGER NOT NULL,
    created_at REAL NOT NULL,
    parent_id  TEXT,
    record     BLOB NOT NULL
);
CREATE INDEX checkpoints_by_session ON checkpoints (session, id);
CREATE TABLE blobs (id INTEGER PRIMARY KEY, digest TEXT NOT NULL UNIQUE, data BLOB NOT NULL);
CREATE TABLE refs (
    checkpoint INTEGER NOT NULL,
    blob       INTEGER NOT NULL,
    PRIMARY KEY (checkpoint, blob)
) WITHOUT ROWID;
CREATE TABLE deleted (id TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE leases (
    session    TEXT PRIMARY KEY,
    token      INTEGER NOT NULL,
    owner      TEXT NOT NULL,
    expires_at REAL NOT NULL,
    released   INTEGER NOT NULL
) WITHOUT ROWID;
"""
# Cancel requests (``request_cancel``, see ``CancelRequests``): the run another process
# asked the holder of a session's lease to cancel, and that lease's token (a new grant
# has another token, so it starts without a request); a row stays until the next
# request of its session replaces it. Not a schema version of its own: a file an
# older actorflow made gets it with its first request (a write, unlike most opens),
# its reads find none until then, and older versions ignore it.
CANCELS = (
    "CREATE TABLE IF NOT EXISTS cancels (session TEXT PRIMARY KEY, token INTEGER NOT NULL,"
    " run TEXT NOT NULL) WITHOUT ROWID"
)
# Schema 3 -> 4 added the leases table (one row per session ever leased; the row
# outlives release so tokens are never reused) and nothing else.
LEASES_TABLE = SCHEMA[SCHEMA.index("CREATE TABLE leases") :].strip().rstrip(";")
# Schema 2 -> 3 dropped these indexes and nothing else: schema 3 is schema 2 minus them.
DROPPED_IN_3 = ("checkpoints_by_workflow", "checkpoints_by_kind", "refs_by_blob")

# Each session's head: the id of the record saved last (inserted last) in it, kept by
# triggers. A second structure of the file that knows what the session's reads should
# find, so that they cross-check the session index in one lookup instead of reading
# every record saved after the answer (the whole table for a session with none):
# ``latest(session=...)`` agrees when the head is the index's newest id (ids follow
# the saves' order, but for clocks of several hosts: then it takes the long way), and
# ``list(session=...)`` needs no search for children of its newest record when that
# record is the head (a child saved in the session after it would be the head).
# Triggers, not the store's code, keep it: they run in every writer's transaction, an
# older process still writing the file and a hand-made INSERT included. It only ever
# holds what a save wrote, never an answer of the index it checks: deleting a
# session's head deletes its row (the session's next save writes it again; until then
# its reads take the long way). Its one page per save is the price (see W3). Schema
# 4 -> 5 added it and nothing else, filled from the table itself (FILL_HEADS: each
# session's row of the greatest rowid, the one inserted last, not through the index).
HEADS = """
CREATE TABLE heads (session TEXT PRIMARY KEY, id TEXT NOT NULL) WITHOUT ROWID;
CREATE TRIGGER heads_after_insert AFTER INSERT ON checkpoints BEGIN
    INSERT OR REPLACE INTO heads (session, id) VALUES (new.session, new.id);
END;
CREATE TRIGGER heads_after_delete AFTER DELETE ON checkpoints BEGIN
    DELETE FROM heads WHERE session = old.session AND id = old.id;
END;
"""
FILL_HEADS = (
    "INSERT INTO heads (session, id) SELECT session, id FROM checkpoints NOT INDEXED"
    " WHERE rowid IN (SELECT max(rowid) FROM checkpoints NOT INDEXED GROUP BY session)"
)


def statements(script: str) -> builtins.list[str]:
    """The statements of ``script``, split where SQLite says one is complete (a
    trigger's body holds semicolons of its own).

    Run one by one rather than by ``executescript``, which commits the caller's
    transaction first.
    """
    found: builtins.list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            found.append(pending.strip())
            pending = ""
    return found


def lease_row(db: sqlite3.Connection, session: str) -> LeaseRow | None:
    """The session's lease row, read inside the caller's transaction."""
    row = db.execute(
        "SELECT token, owner, expires_at, released FROM leases WHERE session = ?", (session,)
    ).fetchone()
    if row is None:
        return None
    token, owner, expires_at, released = row
    # An expiry that is a number is taken as stored, however odd (_lease.live decides
    # on Infinity or 1e308: expired); one that is not a number is damage like any other.
    if not (
        isinstance(token, int)
        and isinstance(owner, str)
        and isinstance(expires_at, int | float)
        and released in (0, 1)
    ):
        raise CheckpointCorrupt(f"the lease row of session {session!r} is damaged: {row!r}")
    return LeaseRow(token, owner, float(expires_at), bool(released))


def with_cancel(db: sqlite3.Connection, session: str, row: LeaseRow) -> LeaseRow:
    """``row`` with the run a cancel was requested of while it held (see :data:`CANCELS`)."""
    try:
        found = db.execute(
            "SELECT run FROM cancels WHERE session = ? AND token = ?", (session, row.token)
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # no request yet in a file an older version made
            return row
        raise
    if found is None:
        return row
    if not isinstance(found[0], str):
        raise CheckpointCorrupt(f"the cancel request of session {session!r} is damaged: {found!r}")
    return replace(row, cancel=found[0])


def put_cancel(db: sqlite3.Connection, session: str, row: LeaseRow) -> None:
    """Store the cancel request ``row`` carries (inside the caller's write transaction)."""
    db.execute(CANCELS)
    db.execute(
        "INSERT OR REPLACE INTO cancels (session, token, run) VALUES (?, ?, ?)",
        (session, row.token, row.cancel),
    )


def put_lease(db: sqlite3.Connection, session: str, row: LeaseRow) -> None:
    db.execute(
        "INSERT OR REPLACE INTO leases (session, token, owner, expires_at, released)"
        " VALUES (?, ?, ?, ?, ?)",
        (session, row.token, row.owner, row.expires_at, int(row.released)),
    )


# Result codes (the low byte of an extended code) that say the file is damaged, even
# where the sqlite3 module raises them as OperationalError.
_DAMAGED = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_FORMAT}
_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_UNWRITABLE = {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM}


# A damaged header can give SQLITE_ERROR with only this message to tell it apart.
_DAMAGED_TEXT = ("unsupported file format", "file is not a database", "malformed")


def _code(exc: sqlite3.Error) -> int:
    return int(getattr(exc, "sqlite_errorcode", -1)) & 0xFF


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is "database is locked/busy": the one error worth retrying."""
    return _code(exc) in _BUSY


def translate(exc: sqlite3.Error, path: Path) -> CheckpointError:
    # Plain DatabaseError is SQLite's "malformed" / "not a database"; its subclasses
    # (locked, I/O error, closed connection, ...) are failures of the medium or of use,
    # except those whose result code says the file is damaged ("unsupported file
    # format" for a damaged header is an OperationalError).
    if (
        type(exc) in (sqlite3.DatabaseError, sqlite3.DataError)
        or _code(exc) in _DAMAGED
        or any(text in str(exc) for text in _DAMAGED_TEXT)
    ):
        return CheckpointCorrupt(f"SQLite store {path} is damaged: {exc}")
    if _code(exc) in _UNWRITABLE:
        return CheckpointError(
            f"SQLite store {path}: {exc}; SQLiteStore needs to write next to the file (its"
            " -wal and -shm files), so it cannot open a store on a read-only file system or"
            " in a folder it may not write: copy the file somewhere writable"
        )
    return CheckpointError(f"SQLite store {path}: {exc}")


def stored_subset(db: sqlite3.Connection, digests: Iterable[str]) -> set[str]:
    """Which of ``digests`` are in the blobs table, in a few queries rather than one each."""
    wanted = sorted(digests)
    present: set[str] = set()
    for start in range(0, len(wanted), 500):
        batch = wanted[start : start + 500]
        marks = ",".join("?" * len(batch))
        query = f"SELECT digest FROM blobs WHERE digest IN ({marks})"
        present.update(row[0] for row in db.execute(query, batch))
    return present


def blob_state(db: sqlite3.Connection, digest: str) -> str:
    """The stored blob's state for verify (see ``actorflow.storage._sql.blob_state``)."""
    row = db.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchone()
    return _state_of(digest, None if row is None else row[0])


def head_agrees(db: sqlite3.Connection, session: str, newest: object | None) -> bool:
    """Whether the heads table names ``newest`` (an id, or None: no record) as
    ``session``'s head (see :data:`HEADS`).

    Compared in SQL: a damaged head is only a disagreement, never text that fails to
    decode (the long way then gives the answer).
    """
    row = db.execute("SELECT id = ? FROM heads WHERE session = ?", (newest, session)).fetchone()
    return row is None if newest is None else row is not None and row[0] == 1


def head_row(db: sqlite3.Connection, session: str) -> builtins.list[tuple[object, ...]]:
    """The row (:data:`COLUMNS`) of ``session``'s head, found by its id: none if the
    heads table has no head for it, or names a record that is not stored."""
    found: builtins.list[tuple[object, ...]] = db.execute(
        f"SELECT {COLUMNS} FROM checkpoints WHERE id = (SELECT id FROM heads WHERE session = ?)",
        (session,),
    ).fetchall()
    return found


def newer_than(
    db: sqlite3.Connection,
    row: tuple[object, ...] | None,
    workflow: str | None,
    session: str | None,
) -> object | None:
    """The id of a matching record newer than ``row`` (what an index gave as the latest).

    Asked of another structure than the one that gave ``row``: the primary-key
    index when the session index answered, the table (by rowid: records inserted
    after ``row``) when the primary-key index did. None: they agree.
    """
    clauses = [
        f"{c} = ?" for c, v in (("workflow", workflow), ("session", session)) if v is not None
    ]
    params: builtins.list[object] = [v for v in (workflow, session) if v is not None]
    if row is None:  # no match at all: confirmed by the table itself
        query = "SELECT id FROM checkpoints NOT INDEXED"
    elif session is not None:
        # "+session": not through the session index, which gave the answer.
        clauses = [f"+{c}" for c in clauses] + ["id > ?"]
        params.append(row[1])
        query = "SELECT id FROM checkpoints INDEXED BY sqlite_autoindex_checkpoints_1"
    else:
        clauses += ["rowid > ?", "id > ?"]
        params += [row[0], row[1]]
        query = "SELECT id FROM checkpoints NOT INDEXED"
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    found = db.execute(f"{query}{where} LIMIT 1", params).fetchone()
    return None if found is None else found[0]


def children(db: sqlite3.Connection, row: tuple[object, ...]) -> builtins.list[tuple[object, ...]]:
    """The rows naming ``row`` (rowid, then :data:`COLUMNS`) as their parent.

    A child is inserted after its parent, so only rows with a greater rowid are read
    (the table's own order: no index by parent is kept, see ``SCHEMA``).
    """
    found: builtins.list[tuple[object, ...]] = db.execute(
        f"SELECT {COLUMNS} FROM checkpoints NOT INDEXED WHERE rowid > ? AND parent_id = ?",
        (row[0], row[1]),
    ).fetchall()
    return found


def next_to(
    db: sqlite3.Connection, rows: builtins.list[tuple[Any, ...]], *, session: str | None
) -> builtins.list[Any]:
    """The rows (:data:`COLUMNS`) next to ``rows`` (rowid, parent_id, then :data:`COLUMNS`)
    in their lineages without being one of them: their parents, and the children of
    those with no child among them (the newest of each lineage).

    The children are looked for among the rows inserted after the oldest such row (a
    child is inserted after its parent; no index by parent is kept, see ``SCHEMA``).
    ``rows`` being every record of ``session`` (when given), none is looked for if
    their one such row is the one inserted last and the session's head: a child of it
    saved in the session would be inserted later, and so be the head.
    """
    ids = {row[2] for row in rows}
    parents = {row[1] for row in rows if row[1] is not None}
    found: builtins.list[Any] = []
    query = f"SELECT {COLUMNS} FROM checkpoints WHERE id = ?"
    for parent in sorted(parents - ids, key=str):
        found += db.execute(query, (parent,)).fetchall()
    leaves = [row for row in rows if row[2] not in parents]
    last = max(rows, key=lambda row: row[0])
    if session is not None and leaves == [last] and head_agrees(db, session, last[2]):
        return found
    first = min(row[0] for row in leaves)
    for at in range(0, len(leaves), 500):  # under any build's limit of bound parameters
        part = [row[2] for row in leaves[at : at + 500]]
        marks = ", ".join("?" * len(part))
        found += db.execute(
            f"SELECT {COLUMNS} FROM checkpoints NOT INDEXED WHERE rowid > ?"
            f" AND parent_id IN ({marks})",
            (first, *part),
        ).fetchall()
    return found


def delete(db: sqlite3.Connection, ids: builtins.list[str]) -> None:
    """Delete records and then every blob that no remaining reference row names."""
    blobs: set[int] = set()
    for checkpoint_id in ids:
        row = db.execute("SELECT rowid FROM checkpoints WHERE id = ?", (checkpoint_id,)).fetchone()
        if row is not None:
            blobs.update(
                r[0] for r in db.execute("SELECT blob FROM refs WHERE checkpoint = ?", (row[0],))
            )
            db.execute("DELETE FROM refs WHERE checkpoint = ?", (row[0],))
        db.execute("DELETE FROM checkpoints WHERE id = ?", (checkpoint_id,))
        db.execute("INSERT OR IGNORE INTO deleted (id) VALUES (?)", (checkpoint_id,))
    candidates = sorted(blobs)
    for start in range(0, len(candidates), 500):
        batch = candidates[start : start + 500]
        marks = ",".join("?" * len(batch))
        # One scan of refs per batch (refs has no index by blob, see SCHEMA).
        query = f"SELECT DISTINCT blob FROM refs WHERE blob IN ({marks})"
        kept = {r[0] for r in db.execute(query, batch)}
        db.executemany(
            "DELETE FROM blobs WHERE id = ?", [(blob,) for blob in batch if blob not in kept]
        )


def new_blob(db: sqlite3.Connection, digest: str, data: bytes) -> int:
    row = db.execute("INSERT INTO blobs (digest, data) VALUES (?, ?)", (digest, data))
    assert row.lastrowid is not None
    return row.lastrowid


def enable_wal(conn: sqlite3.Connection, path: Path) -> None:
    """Put the connection's file in WAL mode (a no-op once it is).

    Raises:
        sqlite3.Error: not "busy" (a damaged header, a read-only file, an I/O error),
            or still busy after the busy timeout.
        CheckpointError: the file cannot use WAL.
    """
    # Switching a new file to WAL needs an exclusive lock, and SQLite may report
    # SQLITE_BUSY for it without consulting the busy handler when several
    # processes open a new file at once; retry within the busy timeout.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.001
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            # Only contention is worth waiting for; a damaged header, a read-only
            # file or an I/O error fails the same way every time.
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
            continue
        if str(mode).lower() != "wal":
            raise CheckpointError(f"SQLite store {path} cannot use WAL (got {mode!r})")
        return


KNOWN_BLOBS = 100_000
"""How many digests a connection remembers as stored before it starts afresh (~15 MB)."""


def known_blobs(db: sqlite3.Connection, local: threading.local) -> dict[str, int]:
    """Digest -> id of blobs known to be stored, for the connection ``db`` of this thread.

    Called inside a write transaction; ``local`` is the thread's state beside ``db``.
    The map holds what this connection's saves looked up or inserted (and committed).
    It is dropped whenever another connection (another thread's, another process's)
    has committed since it was made: ``PRAGMA data_version`` changes then, and only
    then, so a blob deleted (and its id given out again) elsewhere is never taken for
    stored. The connection's own deletes drop it too (``local.blobs = None``).
    """
    version = db.execute("PRAGMA data_version").fetchone()[0]
    known: dict[str, int] | None = getattr(local, "blobs", None)
    if known is None or local.blobs_version != version or len(known) > KNOWN_BLOBS:
        known = local.blobs = {}
        local.blobs_version = version
    return known


def insert_refs(db: sqlite3.Connection, checkpoint: int, blobs: builtins.list[int]) -> None:
    """The reference rows of one record, a few hundred per statement.

    One multi-row INSERT costs ~1 us per row where ``executemany`` costs ~2.3 us (it
    steps the statement once per row from Python); W3's records name ~50 blobs.
    """
    for start in range(0, len(blobs), 400):  # 800 variables: under SQLite's old limit of 999
        batch = sorted(blobs[start : start + 400])
        rows = ",".join(["(?, ?)"] * len(batch))
        values = [value for blob in batch for value in (checkpoint, blob)]
        db.execute(f"INSERT INTO refs (checkpoint, blob) VALUES {rows}", values)


def blob_ids(db: sqlite3.Connection, digests: Iterable[str]) -> dict[str, int]:
    """Digest -> blob id for stored blobs, in a few queries rather than one each."""
    wanted = sorted(digests)
    ids: dict[str, int] = {}
    for start in range(0, len(wanted), 500):
        batch = wanted[start : start + 500]
        marks = ",".join("?" * len(batch))
        query = f"SELECT digest, id FROM blobs WHERE digest IN ({marks})"
        ids.update(db.execute(query, batch))
    return ids
