"""SQLiteStore: checkpoints in one SQLite file, the embedded default for services.

This module holds the schema and the protocol's record and blob methods. The store
is composed of collaborators that own their state: its connections and transactions
(``_connections``), the WAL checkpointer (``_wal``), its leases (``_leases``) and
its verification (``_verify``), each given the connections they run on.
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar, Self

from actorflow.errors import (
    CheckpointCorrupt,
    StoreNotFound,
    UnsupportedFormat,
)
from actorflow.storage._common import (
    age_plan,
    already_stored,
    check_checkpoint_id,
    check_cutoff,
    check_keep,
    check_session_id,
    checked_blobs,
    dangling,
    idle_sessions,
    lineage,
    matching,
    not_found,
    prune_plan,
    session_history,
)
from actorflow.storage._format import Checkpoint, CheckpointKind, encode_checkpoint
from actorflow.storage._history import HistoryEntry
from actorflow.storage._lease import (
    Lease,
    fence,
    leaseless_check,
)
from actorflow.storage._sql import (
    COLUMNS,
    SUMMARIES,
    check_left_out,
    decode_row,
    filters,
    shown_filters,
    summaries_of,
    verified_blobs,
)
from actorflow.storage._statements import Statement, statement_failed
from actorflow.storage._summary import SessionSummary

from . import _sql as sql
from ._connections import SQLiteConnections
from ._leases import SQLiteLeases
from ._sql import SCHEMA_VERSION
from ._verify import SQLiteVerify
from ._wal import WalCheckpointer


class SQLiteStore:
    """A checkpoint store in one SQLite database file; the documented default for services.

    - WAL journal, ``synchronous=FULL`` (a committed checkpoint survives power
      loss, at one WAL fsync per save), 30 s busy timeout, and ``BEGIN IMMEDIATE``
      for every write: concurrent writers in threads or processes queue for the
      write lock instead of failing with "database is locked" (LangGraph #8136).
    - One transaction per save: the record row, its new blob rows and its
      reference rows commit together or not at all.
    - WAL checkpoints (copying the log into the file, which only bounds the log's
      size) run on a short-lived thread between saves, not inside a save's commit
      (see ``_wal``). New files use 2 KB pages (``_sql.PAGE_SIZE``).
    - Tables: ``checkpoints`` (indexed by session, workflow and kind), ``blobs``
      (id, digest -> bytes), ``refs`` (which checkpoint uses which blob, as integer
      ids: a record names every chunk of every executor; blob collection
      is a reference check inside the deleting transaction), ``deleted`` (ids
      removed by delete/prune, so :meth:`verify` can tell a pruned parent from a
      never-stored one), ``leases`` (one row per leased session; a save checks it
      in its own transaction) and ``actorflow_schema`` (a newer schema is refused;
      older ones are upgraded in place).
    - Thread-safe: each thread uses its own connection; :meth:`close` closes all.
      Several processes may open the same file (not over a network file system).

    The filter columns repeat fields of the record; reads decode the record and
    raise :class:`CheckpointCorrupt` if the two disagree.

    Args:
        path: the database file; created with the schema if missing.
        create: whether to make the file and the tables when they are missing. With
            ``create=False`` the store opens only an actorflow store that exists
            (what a reader such as ``actorflow checkpoints list`` wants): a missing
            file, or a SQLite file without actorflow's tables, raises
            :class:`StoreNotFound` and nothing is created or changed.

    Raises:
        ValueError: ``path`` is ``":memory:"`` or empty (use MemoryStore).
        StoreNotFound: ``create=False`` and no actorflow store is at ``path``.
        UnsupportedFormat: the file has a newer actorflow schema.
        CheckpointCorrupt: the file is not an SQLite database, or is damaged.
        CheckpointError: the file cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        if os.fspath(path) in ("", ":memory:"):
            raise ValueError("SQLiteStore needs a file path; use MemoryStore for in-memory use")
        self._path = Path(path)
        if not create:
            _check_exists(self._path)
        self._connections = SQLiteConnections(self._path, repr(self))
        self._wal = WalCheckpointer(self._connections.connect)
        self._leases = SQLiteLeases(self._connections, self._path)
        self._verifier = SQLiteVerify(self._connections)
        self._page_size = 4096
        try:
            self._init_schema()
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self._path)!r})"

    def close(self) -> None:
        """Close every connection this store opened, in any thread. Idempotent; never waits
        for a call: one running is interrupted and raises StoreClosed (see ``_connections``).

        The WAL checkpoint thread's connection likewise (its checkpoint interrupted; that
        wait is bounded, see ``WalCheckpointer.close``).
        """
        self._connections.close()
        self._wal.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- the protocol ------------------------------------------------------------

    sql_dialect: ClassVar[str] = "sqlite"
    """What ``ctx.sql`` statements are written in (see :class:`CommitsStatements`)."""

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        """Store a record and its new blobs in one transaction (see CheckpointStore.save).

        The lease row is read in the same write transaction (BEGIN IMMEDIATE holds the
        write lock), so no lease change can come between the fencing check and commit.
        """
        self._save(checkpoint, blobs, lease, ())

    def save_with_statements(
        self,
        checkpoint: Checkpoint,
        blobs: Mapping[str, bytes],
        statements: Sequence[Statement],
        *,
        lease: Lease | None = None,
    ) -> None:
        """:meth:`save`, with ``ctx.sql`` statements run in its transaction, after the
        fencing check and before the record (see :class:`CommitsStatements`).

        Raises:
            StatementFailed: a statement failed; nothing was committed.
        """
        self._save(checkpoint, blobs, lease, statements)

    def _save(
        self,
        checkpoint: Checkpoint,
        blobs: Mapping[str, bytes],
        lease: Lease | None,
        statements: Sequence[Statement],
    ) -> None:
        record = encode_checkpoint(checkpoint)
        referenced = checkpoint.blob_digests()
        given = checked_blobs(checkpoint.id, blobs, referenced)
        digests = sorted(referenced)
        cp = checkpoint
        self._wal.settle()  # see _wal: this save then starts the log afresh
        with self._connections.write() as db:
            holder = sql.lease_row(db, cp.session)
            if lease is not None:
                fence(holder, lease, cp.session, cp.id)
            elif holder is not None:
                leaseless_check(holder, cp.session, cp.id, time.time())
            for statement in statements:
                try:
                    db.execute(statement.sql, statement.params)
                except sqlite3.Error as exc:
                    raise statement_failed(statement, exc) from exc  # rolls everything back
            # The primary key refuses a second record with this id; no SELECT first.
            try:
                row = db.execute(
                    "INSERT INTO checkpoints (id, session, workflow, kind, superstep, created_at,"
                    " parent_id, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        cp.id,
                        cp.session,
                        cp.workflow,
                        cp.kind.value,
                        cp.superstep,
                        cp.created_at,
                        cp.parent_id,
                        record,
                    ),
                )
            except sqlite3.IntegrityError:
                raise already_stored(cp.id) from None
            # A record names every chunk of every executor, and nearly all of them were
            # named by the previous record too: their ids come from this connection's
            # memory of what is stored (see SQLiteConnections.known_blobs); one lookup gives the ids of
            # the others, and tells which of them are stored at all.
            known = self._connections.known_blobs(db)
            unknown = [d for d in digests if d not in known]
            found = sql.blob_ids(db, unknown) if unknown else {}
            missing = [d for d in unknown if d not in found and d not in given]
            if missing:
                raise dangling(cp.id, missing)  # rolls the record back too
            written = len(record)
            for digest in unknown:
                if digest not in found:
                    found[digest] = sql.new_blob(db, digest, given[digest])
                    written += len(given[digest])
            # References are integer pairs (the record's rowid, the blob's id): a
            # checkpoint names every chunk of every executor, so 64-character digests
            # here would cost more disk than the changed chunks themselves.
            assert row.lastrowid is not None
            sql.insert_refs(
                db, row.lastrowid, [known[d] if d in known else found[d] for d in digests]
            )
        # Only once committed: the ids of a rolled-back insert may be given out again.
        known.update(found)
        # Roughly what the commit appended to the log: the record, the new blobs and
        # ~10 b-tree pages (page 1, the tables' and indexes' leaves, the refs pages).
        self._wal.wrote(written + 10 * self._page_size)

    def load(self, checkpoint_id: str) -> Checkpoint:
        """The record with this id, freshly decoded (see CheckpointStore.load)."""
        check_checkpoint_id(checkpoint_id)
        with self._connections.read() as db:
            row = db.execute(
                f"SELECT {COLUMNS} FROM checkpoints WHERE id = ?", (checkpoint_id,)
            ).fetchone()
        if row is None:
            raise not_found(checkpoint_id)
        return decode_row(row)

    def load_blob(self, digest: str) -> bytes:
        """The blob with this digest, verified (see CheckpointStore.load_blob)."""
        with self._connections.read() as db:
            row = db.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchone()
        return verified_blobs([digest], {} if row is None else {digest: row[0]})[digest]

    def load_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Several blobs in one read transaction, each verified (see :class:`BlobBatchReader`).

        Raises:
            CheckpointNotFound: one of them is not stored.
            CheckpointCorrupt: one of them does not match its digest.
        """
        wanted = sorted(set(digests))
        found: dict[str, object] = {}
        with self._connections.read() as db:
            for start in range(0, len(wanted), 500):
                batch = wanted[start : start + 500]
                marks = ",".join("?" * len(batch))
                query = f"SELECT digest, data FROM blobs WHERE digest IN ({marks})"
                for digest, data in db.execute(query, batch):
                    found[digest] = data
        return verified_blobs(wanted, found)

    def has_blobs(self, digests: Iterable[str]) -> set[str]:
        """The subset of ``digests`` that is stored."""
        wanted = {d for d in digests if isinstance(d, str)}
        with self._connections.read() as db:
            return sql.stored_subset(db, wanted)

    def list(
        self,
        *,
        workflow: str | None = None,
        session: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> builtins.list[Checkpoint]:
        """Matching records, oldest first; a damaged match raises CheckpointCorrupt."""
        where, params = filters(workflow, session, kind, mark="?")
        left_out: builtins.list[tuple[object, ...]] = []
        with self._connections.read() as db:
            rows = db.execute(
                f"SELECT rowid, parent_id, {COLUMNS} FROM checkpoints{where} ORDER BY id",
                params,
            ).fetchall()
            if where and rows:  # (without a filter every row is returned, and decoded)
                whole_session = session if workflow is None and kind is None else None
                left_out = sql.next_to(db, rows, session=whole_session)
            elif session is not None:  # an index that gives nothing must not hide the head
                left_out = sql.head_row(db, session)
        found = [decode_row(row[2:]) for row in rows]
        check_left_out(
            decode_row,
            left_out,
            read=f"list({shown_filters(workflow=workflow, session=session, kind=kind)})",
            next_to="a parent or child of a listed record",
            matches=matching(workflow, session, kind),
        )
        return found

    def latest(
        self, *, workflow: str | None = None, session: str | None = None
    ) -> Checkpoint | None:
        """The newest matching record, or None; a damaged one raises, it is not skipped.

        The answer an index gives is cross-checked through another structure of
        the file (a damaged index page must not make a resume silently return an
        older checkpoint). For a session, that is the heads table (see
        ``sql.HEADS``): when it names the same record, or no record as the index
        does, the answer stands, in one lookup however large the store. Otherwise
        (or without a session) the answer is checked the long way: through the
        primary-key index for an answer of the session index, the table itself for
        an answer of the primary-key index, both reading only rows newer than the
        answer (the whole table when there is none); and the answer's children
        (rows inserted after it) are decoded: one whose columns disagree with its
        record may be the newest, its session or id column changed (see
        ``check_left_out``). A damaged index or row gives another answer than the
        head its save recorded, so it takes the long way: only the heads table
        damaged to match as well could hide it.
        """
        where, params = filters(workflow, session, None, mark="?")
        newer: object | None = None
        children: builtins.list[tuple[object, ...]] = []
        with self._connections.read() as db:
            row = db.execute(
                f"SELECT rowid, {COLUMNS} FROM checkpoints{where} ORDER BY id DESC LIMIT 1",
                params,
            ).fetchone()
            if session is None or not sql.head_agrees(db, session, None if row is None else row[1]):
                newer = sql.newer_than(db, row, workflow, session)
                children = sql.children(db, row) if row is not None else []
        if newer is not None:
            raise CheckpointCorrupt(
                f"SQLite store {self._path} is damaged: its indexes miss checkpoint {newer!r}, "
                "newer than what they give as the latest; run `actorflow checkpoints verify` "
                "and restore the file from a backup (or REINDEX it)"
            )
        if row is None:
            return None
        cp = decode_row(row[1:])
        if (session is not None and cp.session != session) or (
            workflow is not None and cp.workflow != workflow
        ):
            raise CheckpointCorrupt(
                f"SQLite store {self._path} is damaged: an index gives checkpoint {cp.id} "
                f"(session {cp.session!r}, workflow {cp.workflow!r}) for session {session!r}, "
                f"workflow {workflow!r}; restore the file from a backup (or REINDEX it)"
            )
        check_left_out(
            decode_row,
            children,
            read=f"latest({shown_filters(workflow=workflow, session=session)})",
            next_to=f"a child of {cp.id}, the newest match",
        )
        return cp

    def history(self, checkpoint_id: str) -> builtins.list[Checkpoint]:
        """This record and its stored ancestors, newest first (see CheckpointStore.history)."""
        return lineage(self, checkpoint_id)

    def session_history(self, session: str, *, since: int = 0) -> builtins.list[HistoryEntry]:
        """The session's history entries from ``since`` (see CheckpointStore.session_history)."""
        check_session_id(session, "session")
        return session_history(self.list(session=session), since)

    def sessions(self) -> builtins.list[str]:
        """Every session with a stored record, sorted."""
        with self._connections.read() as db:
            rows = db.execute("SELECT DISTINCT session FROM checkpoints ORDER BY session")
            found = [r[0] for r in rows]
        if not all(type(name) is str for name in found):
            raise CheckpointCorrupt(f"SQLite store {self._path} is damaged: a session is not text")
        return found

    def session_summaries(self) -> builtins.list[SessionSummary]:
        """Every session summarised in one query (the ``SummarisesSessions`` fast path):
        only each session's newest record is decoded."""
        with self._connections.read() as db:
            rows = db.execute(SUMMARIES.format(table="checkpoints")).fetchall()
        return summaries_of(rows)

    def delete(self, checkpoint_id: str) -> None:
        """Delete a record (damaged or not) and collect unreferenced blobs."""
        check_checkpoint_id(checkpoint_id)
        with self._connections.write() as db:
            if not db.execute(
                "SELECT 1 FROM checkpoints WHERE id = ?", (checkpoint_id,)
            ).fetchone():
                raise not_found(checkpoint_id)
            sql.delete(db, [checkpoint_id])
            self._connections.forget_blobs()

    def prune(self, session: str, keep: int) -> int:
        """Keep the newest ``keep`` cuts of ``session`` (see CheckpointStore.prune)."""
        check_session_id(session, "session")
        check_keep(keep)
        with self._connections.write() as db:
            rows = db.execute(
                "SELECT id, kind, parent_id FROM checkpoints WHERE session = ?", (session,)
            ).fetchall()
            doomed = prune_plan(rows, keep)
            sql.delete(db, doomed)
            self._connections.forget_blobs()
        return len(doomed)

    def ids(self) -> builtins.list[str]:
        """Every stored checkpoint id, damaged records included, oldest first.

        Not part of the protocol: what ``actorflow checkpoints verify`` counts, and
        how it reaches the records that :meth:`list` cannot decode around.
        """
        with self._connections.read() as db:
            found = [r[0] for r in db.execute("SELECT id FROM checkpoints NOT INDEXED")]
        return sorted(str(i) for i in found)

    def prune_older_than(self, cutoff: float, *, whole_sessions: bool = False) -> int:
        """Remove records by age (see CheckpointStore.prune_older_than)."""
        limit = check_cutoff(cutoff)
        with self._connections.write() as db:
            rows = db.execute(
                "SELECT id, session, kind, parent_id, created_at FROM checkpoints WHERE session"
                " IN (SELECT session FROM checkpoints WHERE created_at < ?)",
                (limit,),
            ).fetchall()
            # Leases are granted in write transactions too: none changes meanwhile.
            now = time.time()
            idle = idle_sessions(rows, limit) if whole_sessions else set()
            leases = {s: sql.lease_row(db, s) for s in idle}
            open_sessions = {s for s, lease in leases.items() if lease and lease.live(now)}
            doomed = age_plan(
                rows, limit, whole_sessions=whole_sessions, open_sessions=open_sessions
            )
            sql.delete(db, doomed)
            self._connections.forget_blobs()
        return len(doomed)

    def verify(self) -> builtins.list[str]:
        """Every problem found in the store, one line each; [] when healthy.

        A file too damaged for the checks to finish gives the problem that
        stopped them (with those found before it), rather than raising.
        """
        return self._verifier.verify()

    # --- leases (see CheckpointStore.acquire_lease) --------------------------------

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        """Take the session if no live lease holds it (see CheckpointStore.acquire_lease);
        ``lock_wait`` bounds the wait for the file's write lock (see SQLiteLeases.acquire)."""
        return self._leases.acquire(session, owner, ttl, lock_wait=lock_wait)

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend a current lease (see CheckpointStore.renew_lease)."""
        return self._leases.renew(lease, ttl)

    def release_lease(self, lease: Lease) -> None:
        """End a current lease; a stale one is ignored (see CheckpointStore.release_lease)."""
        self._leases.release(lease)

    def current_lease(self, session: str) -> Lease | None:
        """The live lease of ``session``, or None."""
        return self._leases.current(session)

    def request_cancel(self, session: str, run_id: str) -> bool:
        """Note a cancel of ``run_id`` for the holder of ``session`` (see CancelRequests)."""
        return self._leases.request_cancel(session, run_id)

    # --- internals -----------------------------------------------------------------

    def _init_schema(self) -> None:
        # An open that finds the schema in place (nearly every open) only reads it: the
        # write lock may be held by a process stalled inside a save, for as long as it
        # stays stalled, and opening a store must not wait for that.
        with self._connections.read() as db:
            self._page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
            exists, version = _schema_version(db)
        if exists and version == SCHEMA_VERSION:
            return
        with self._connections.write() as db:
            exists, version = _schema_version(db)  # again: another process may have been first
            if not exists:
                db.execute("CREATE TABLE actorflow_schema (version INTEGER NOT NULL)")
                for statement in sql.statements(sql.SCHEMA + sql.HEADS):
                    db.execute(statement)
                db.execute(sql.CANCELS)
                db.execute("INSERT INTO actorflow_schema (version) VALUES (?)", (SCHEMA_VERSION,))
                return
            if version in (2, 3, 4):
                # Upgrading in place keeps older processes' statements working (they run
                # without the dropped indexes, only slower; the triggers keep the heads
                # of what they save), but schema 2 and 3 ignore leases: upgrade every
                # process that writes to the file.
                for index in sql.DROPPED_IN_3:
                    db.execute(f"DROP INDEX IF EXISTS {index}")
                db.execute(f"CREATE TABLE IF NOT EXISTS {sql.LEASES_TABLE[len('CREATE TABLE ') :]}")
                for statement in sql.statements(sql.HEADS):
                    db.execute(statement)
                db.execute(sql.FILL_HEADS)
                db.execute("UPDATE actorflow_schema SET version = ?", (SCHEMA_VERSION,))
                return
        if isinstance(version, int) and version < SCHEMA_VERSION:
            raise UnsupportedFormat(
                f"SQLite store {self._path} has actorflow schema {version}, written by an "
                f"older actorflow; this one reads schema {SCHEMA_VERSION} and has no migration "
                "for it. Open it with the version that wrote it."
            )
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise UnsupportedFormat(
                f"SQLite store {self._path} has actorflow schema {version}; this actorflow "
                f"reads schema {SCHEMA_VERSION}. Upgrade actorflow."
            )
        if version != SCHEMA_VERSION:
            raise CheckpointCorrupt(
                f"SQLite store {self._path} has a damaged schema table (version {version!r})"
            )


def _check_exists(path: Path) -> None:
    """Raise StoreNotFound unless ``path`` is a SQLite file with actorflow's tables.

    Reads through a connection that cannot create the file (``mode=rw``) and sets no
    pragma, so a file that is not a store is left exactly as it was.
    """
    if not path.is_file():
        raise StoreNotFound(
            f"no actorflow store at {path}: no such file; check the path "
            "(SQLiteStore(path) with create=True makes a new one)"
        )
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True)
    except sqlite3.Error as exc:
        raise sql.translate(exc, path) from exc
    try:
        exists, _version = _schema_version(db)
    except sqlite3.Error as exc:
        raise sql.translate(exc, path) from exc
    finally:
        db.close()
    if not exists:
        raise StoreNotFound(
            f"no actorflow store at {path}: the SQLite file has no actorflow tables; "
            "check the path (nothing was changed)"
        )


def _schema_version(db: sqlite3.Connection) -> tuple[bool, object]:
    """(whether the schema table exists, the version it holds: None if it holds none)."""
    exists = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'actorflow_schema'"
    ).fetchone()
    if not exists:
        return False, None
    row = db.execute("SELECT max(version) FROM actorflow_schema").fetchone()
    return True, row[0] if row else None
