"""PostgresStore: checkpoints in a PostgreSQL database, for services on several hosts.

Requires the ``actorflow[postgres]`` extra (psycopg 3 and psycopg_pool); nothing in
``import actorflow`` imports this module.

This module holds the protocol's record and blob methods. The store is composed of
collaborators that own their state: its connections (``_pool``), its leases
(``_leases``) and its verification (``_verify``), each given what they run on.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any, ClassVar, Self

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

from actorflow.errors import (
    CheckpointError,
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
from actorflow.storage._lease import Lease, fence, leaseless_check
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
from ._leases import (
    FENCED,
    OPEN_AMONG,
    ROWS_FOR,
    ROWS_GONE,
    UNLEASED,
    PostgresLeases,
    session_key,
)
from ._pool import PostgresConnections, connect_settings, new_pool, probe
from ._schema import open_schema
from ._verify import PostgresVerify

Conn = psycopg.Connection[Any]

PIPELINE_MAX_BYTES = 64 * 1024
"""A save whose new blobs total more than this is not pipelined (see ``save``)."""


class PostgresStore:
    """A checkpoint store in a PostgreSQL database (extra ``actorflow[postgres]``).

    - One transaction per save: the record row and its new blob rows commit together
      or not at all; a reader never sees half of a checkpoint. Blobs are
      content-addressed rows shared by every checkpoint, session and workflow of the
      schema: a save sends and writes only the chunks that are not stored yet, and a
      stored chunk is never rewritten.
    - Durability is the server's: with its defaults (``fsync``, ``synchronous_commit``
      on) a save returns once its commit is flushed to the write-ahead log.
    - Connections come from a psycopg_pool ``ConnectionPool`` that checks each one
      before handing it out (a round trip only if the server may have ended it:
      ``_pool.check_idle``) and replaces
      connections past ``max_lifetime`` or idle past ``max_idle``: after a server
      restart or a connection terminated by the server, the next call gets a fresh
      connection. A call whose connection breaks under it is retried once on a new
      connection (a save whose commit may have landed checks for its own record
      first); if that fails too it raises :class:`CheckpointError`, and the runtime
      fails the superstep with ``CheckpointWriteFailed`` and rolls it back.
    - Tables live in ``schema`` (created with the tables on first use, versioned in
      ``<schema>.actorflow_schema``; an older version is upgraded in place, a newer
      one refused). Several stores, workflows and sessions can share one database.
    - Deletes and prunes take an exclusive advisory lock of the schema that saves
      share, so a collection never removes a blob a concurrent save is about to
      reference. Collection scans the records' reference arrays once per call.
    - Session leases (``acquire_lease`` ...) live in ``<schema>.leases`` and expire by
      the server's clock. A save's record ``INSERT`` reads the session's lease row,
      holding the session's advisory lock shared (lease changes hold it
      exclusively), and inserts nothing unless the fencing check passes.

    Args:
        dsn_or_pool: a libpq connection string (``postgresql://user@host/db``), or a
            ``psycopg_pool.ConnectionPool`` the caller owns (then ``pool_size``,
            ``timeout``, ``max_lifetime`` and ``max_idle`` are the pool's business,
            and :meth:`close` leaves it open).
        schema: the PostgreSQL schema holding the tables; a plain lowercase identifier.
        pool_size: the most connections the store's own pool opens.
        timeout: seconds to wait for a free connection before raising CheckpointError.
        connect_timeout: seconds a new connection may take (libpq counts whole
            seconds, at least 2); None: the DSN's own ``connect_timeout``, else 5.
            The store connects once as it opens, so a server that refuses (nothing
            listening, an unknown database or role, a wrong password) or does not
            answer fails the constructor within this bound, with the server's reason.
        max_lifetime: seconds after which a pooled connection is replaced.
        max_idle: seconds after which an idle pooled connection is closed.
        create: whether to create the schema and its tables when they are missing.
            With ``create=False`` the store opens only a schema actorflow made (what
            a reader such as ``actorflow checkpoints list`` wants): otherwise it
            raises :class:`StoreNotFound` and nothing is created.

    Raises:
        ValueError: ``schema`` is not a plain identifier, or ``connect_timeout`` not
            a positive number.
        UnsupportedFormat: the schema was written by a newer actorflow.
        StoreNotFound: ``create=False`` and the schema holds no actorflow tables.
        CheckpointError: the DSN is not valid, the server refuses the connection or
            does not answer within ``connect_timeout`` (the message carries the
            server's reason), or no pooled connection comes within ``timeout``.
    """

    def __init__(
        self,
        dsn_or_pool: str | psycopg_pool.ConnectionPool[Any],
        *,
        schema: str = "actorflow",
        pool_size: int = 4,
        timeout: float = 30.0,
        max_lifetime: float = 3600.0,
        max_idle: float = 600.0,
        connect_timeout: float | None = None,
        create: bool = True,
    ) -> None:
        self._sql = sql.Statements(schema)
        self._schema = schema
        owns_pool = not isinstance(dsn_or_pool, psycopg_pool.ConnectionPool)
        make_pool = None
        if isinstance(dsn_or_pool, psycopg_pool.ConnectionPool):
            pool: psycopg_pool.ConnectionPool[Any] = dsn_or_pool
            self._where = f"pool {dsn_or_pool.name}"
        else:
            settings = connect_settings(dsn_or_pool, connect_timeout)
            self._where = _redact(dsn_or_pool)
            probe(dsn_or_pool, settings, self._where)
            make_pool = partial(
                new_pool,
                dsn_or_pool,
                schema=schema,
                pool_size=pool_size,
                timeout=timeout,
                max_lifetime=max_lifetime,
                max_idle=max_idle,
                settings=settings,
            )
            pool = make_pool()
        self._connections = PostgresConnections(
            pool, owns_pool=owns_pool, where=self._where, name=repr(self), make_pool=make_pool
        )
        self._run = self._connections.run
        self._verifier = PostgresVerify(self._connections, self._sql)
        q = self._sql
        # Chunks, records and digest lists travel in binary (``%b``, ``binary=True``):
        # as text, bytea is hex on the wire (twice the bytes) and psycopg escapes every
        # array element in Python, ~0.3 ms per W3-sized save.
        self._q_lock_shared = q(
            f"SELECT pg_advisory_xact_lock_shared({sql.LOCK_DATA}, {q.key}),"
            " pg_advisory_xact_lock_shared(%s::bigint)"
        )
        self._q_lock_excl = q(f"SELECT pg_advisory_xact_lock({sql.LOCK_DATA}, {q.key})")
        self._q_blob_ids = q("SELECT digest, id FROM {s}.blobs WHERE digest = ANY(%s)")
        self._q_new_blobs = q(
            "INSERT INTO {s}.blobs (digest, data) SELECT * FROM unnest(%b::text[], %b::bytea[])"
            " ON CONFLICT (digest) DO NOTHING"
        )
        # The record's INSERT names its blobs by digest and resolves them to ids on
        # the server; it inserts nothing unless every referenced blob is stored (given
        # ones included: the statement sees this transaction's rows, and ON CONFLICT
        # waited for any concurrent save storing the same digest to commit) and the
        # fencing check passes. Inserting nothing divides by zero on purpose: the
        # statement fails, so the COMMIT sent along with it in the same round trip
        # rolls the new blobs back too, and ``save`` then finds out why.
        insert = (
            "WITH saved AS (INSERT INTO {s}.checkpoints (id, session, workflow, kind,"
            " superstep, created_at, parent_id, record, blob_ids) SELECT %s::text, %s::text,"
            " %s::text, %s::text, %s::bigint, %s::float8, %s::text, %b::bytea,"
            " coalesce(array_agg(id), '{}') FROM {s}.blobs WHERE digest = ANY(%b::text[])"
            " HAVING count(*) = %s::bigint AND {allowed} ON CONFLICT (id) DO NOTHING"
            " RETURNING 1) SELECT 1 / count(*)::int FROM saved"
        )
        self._q_save = {
            leased: q(insert.replace("{allowed}", FENCED if leased else UNLEASED))
            for leased in (True, False)
        }
        self._q_record = q("SELECT record FROM {s}.checkpoints WHERE id = %s")
        self._q_load = q(f"SELECT {COLUMNS} FROM {{s}}.checkpoints WHERE id = %s")
        self._q_blobs = q("SELECT digest, data FROM {s}.blobs WHERE digest = ANY(%b::text[])")
        try:
            if owns_pool:
                pool.open(wait=True, timeout=timeout)
            self._init_schema(create)
        except psycopg_pool.PoolTimeout as exc:
            self.close()
            raise CheckpointError(
                f"PostgresStore: no connection to {self._where} within {timeout} s: {exc}; "
                "check that the server is up and the DSN is right"
            ) from exc
        except BaseException:
            self.close()
            raise

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self._schema

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, schema={self._schema!r})"

    # --- the protocol ------------------------------------------------------------

    sql_dialect: ClassVar[str] = "postgres"
    """What ``ctx.sql`` statements are written in (see :class:`CommitsStatements`)."""

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        """Store a record and its new blobs in one transaction (see CheckpointStore.save).

        The fencing check is part of the record's INSERT, under the session's advisory
        lock (shared), in the transaction whose COMMIT goes out with it.
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
        """:meth:`save`, with ``ctx.sql`` statements run in its transaction before the
        record's INSERT, whose fencing check rolls them back with everything else (see
        :class:`CommitsStatements`).

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
        first_try = True

        params: tuple[object, ...] = (
            cp.id,
            cp.session,
            cp.workflow,
            cp.kind.value,
            cp.superstep,
            cp.created_at,
            cp.parent_id,
            record,
            digests,
            len(digests),
        )

        # psycopg's pipeline mode can stall on large messages (psycopg #685): a save
        # carrying many new bytes (a first checkpoint, a big state change) goes
        # statement by statement; its round trips are small next to its bytes.
        # With statements, each goes on its own, so a failing one is known as such.
        pipelined = not statements and sum(len(b) for b in given.values()) <= PIPELINE_MAX_BYTES
        # New blobs go in in digest order: two saves sharing some (the same first state
        # in two sessions) then wait for each other's rows in one order, never in a
        # cycle; in the caller's order they deadlocked (3 saves in 240, 8 at a time).
        new_order = sorted(given)
        new_blobs = (new_order, [given[d] for d in new_order])
        lock_key = session_key(self._schema, cp.session)
        if lease is not None:
            if lease.session != cp.session:
                fence(None, lease, cp.session, cp.id)  # raises: the lease of another session
            params += (cp.session, lease.token)
        else:
            params += (cp.session,)

        def write(db: Conn) -> None:
            nonlocal first_try
            retry, first_try = not first_try, False
            if retry and self._stored_record(db, cp.id) == record:
                return  # the first attempt committed before its connection broke
            # Pipelined: BEGIN, the locks, the new blobs, the record and the COMMIT go
            # out together, one round trip. On loopback a second one (a COMMIT sent
            # after the checks came back) costs little, the server being awake; over
            # a network it costs the round-trip time on every checkpoint. The
            # record's INSERT does the fencing check (see ``_q_save``).
            batch = db.pipeline() if pipelined else contextlib.nullcontext()
            try:
                with batch, db.transaction():
                    db.execute(self._q_lock_shared, (lock_key,))
                    if given:
                        db.execute(self._q_new_blobs, new_blobs)
                    for statement in statements:
                        try:
                            db.execute(statement.sql, statement.params)
                        except psycopg.Error as exc:
                            if db.closed or db.broken:
                                raise  # the connection, not the statement: retried
                            raise statement_failed(statement, exc) from exc
                    db.execute(self._q_save[lease is not None], params)
            except pg_errors.DivisionByZero:
                raise self._refused(db, cp, digests, lease) from None

        self._run(write, what=f"save checkpoint {cp.id}")

    def load(self, checkpoint_id: str) -> Checkpoint:
        """The record with this id, freshly decoded (see CheckpointStore.load)."""
        check_checkpoint_id(checkpoint_id)
        row = self._run(
            lambda db: db.execute(self._q_load, (checkpoint_id,), binary=True).fetchone(),
            what=f"load checkpoint {checkpoint_id}",
        )
        if row is None:
            raise not_found(checkpoint_id)
        return decode_row(row)

    def load_blob(self, digest: str) -> bytes:
        """The blob with this digest, verified (see CheckpointStore.load_blob)."""
        return self.load_blobs([digest])[digest]

    def load_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Several blobs in one query, each verified (see :class:`BlobBatchReader`).

        Raises:
            CheckpointNotFound: one of them is not stored.
            CheckpointCorrupt: one of them does not match its digest.
        """
        wanted = sorted({str(d) for d in digests})
        rows = self._run(
            lambda db: db.execute(self._q_blobs, (wanted,), binary=True).fetchall(),
            what="load blobs",
        )
        return verified_blobs(wanted, dict(rows))

    def has_blobs(self, digests: Iterable[str]) -> set[str]:
        """The subset of ``digests`` that is stored."""
        wanted = sorted({d for d in digests if isinstance(d, str)})
        if not wanted:
            return set()
        query = self._sql("SELECT digest FROM {s}.blobs WHERE digest = ANY(%s)")
        rows = self._run(lambda db: db.execute(query, (wanted,)).fetchall(), what="look up blobs")
        return {r[0] for r in rows}

    def list(
        self,
        *,
        workflow: str | None = None,
        session: str | None = None,
        kind: CheckpointKind | None = None,
    ) -> builtins.list[Checkpoint]:
        """Matching records, oldest first; a damaged match raises CheckpointCorrupt."""
        where, params = filters(workflow, session, kind, mark="%s")
        if not where:  # every row is returned, and decoded
            query = self._sql(f"SELECT {COLUMNS} FROM {{s}}.checkpoints ORDER BY id")
            rows = self._run(
                lambda db: db.execute(query, binary=True).fetchall(), what="list checkpoints"
            )
            return [decode_row(row) for row in rows]
        # With a filter, the rows next to the matches in their lineages come along, in
        # the same round trip: their parents, and the children of those with no child
        # among them (the newest of each lineage). One whose columns disagree with its
        # record may be a match whose session column, say, was changed (see
        # check_left_out). As arrays, they are found through the primary key and the
        # parent index; as subqueries they were planned as scans of the table.
        query = self._sql(
            f"WITH found AS (SELECT {COLUMNS}, parent_id FROM {{s}}.checkpoints{where}),"
            " ids AS (SELECT array_agg(id) AS listed, array_agg(parent_id) FILTER (WHERE"
            " parent_id NOT IN (SELECT id FROM found)) AS parents, array_agg(id) FILTER"
            " (WHERE id NOT IN (SELECT parent_id FROM found WHERE parent_id IS NOT NULL))"
            " AS leaves FROM found)"
            f" SELECT 0, {COLUMNS} FROM found UNION ALL SELECT 1, {sql.prefixed('c')}"
            " FROM {s}.checkpoints c, ids WHERE (c.parent_id = ANY(ids.leaves)"
            " OR c.id = ANY(ids.parents)) AND NOT c.id = ANY(ids.listed) ORDER BY 1, 2"
        )
        rows = self._run(
            lambda db: db.execute(query, params, binary=True).fetchall(), what="list checkpoints"
        )
        found = [decode_row(row[1:]) for row in rows if row[0] == 0]
        check_left_out(
            decode_row,
            (row[1:] for row in rows if row[0] == 1),
            read=f"list({shown_filters(workflow=workflow, session=session, kind=kind)})",
            next_to="a parent or child of a listed record",
            matches=matching(workflow, session, kind),
        )
        return found

    def latest(
        self, *, workflow: str | None = None, session: str | None = None
    ) -> Checkpoint | None:
        """The newest matching record, or None; a damaged one raises, it is not skipped."""
        where, params = filters(workflow, session, None, mark="%s")
        # max(id) is read from the end of an index ((session, id), or the primary key)
        # whatever the table's statistics say; ORDER BY id DESC LIMIT 1 was planned,
        # on a young table, as a scan and sort of every record of the session.
        # The answer's children come along (the same round trip, through the parent
        # index): one whose columns disagree with its record may be the newest record
        # with its session or id column changed (see check_left_out).
        query = self._sql(
            f"WITH newest AS (SELECT max(id) AS id FROM {{s}}.checkpoints{where})"
            f" SELECT c.id = n.id, {sql.prefixed('c')} FROM {{s}}.checkpoints c, newest n"
            " WHERE c.id = n.id OR c.parent_id = n.id"
        )
        rows = self._run(
            lambda db: db.execute(query, params, binary=True).fetchall(), what="find latest"
        )
        answer = [row[1:] for row in rows if row[0]]
        if not answer:
            return None
        cp = decode_row(answer[0])
        check_left_out(
            decode_row,
            (row[1:] for row in rows if not row[0]),
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
        query = self._sql("SELECT DISTINCT session FROM {s}.checkpoints ORDER BY session")
        rows = self._run(lambda db: db.execute(query).fetchall(), what="list sessions")
        return [r[0] for r in rows]

    def session_summaries(self) -> builtins.list[SessionSummary]:
        """Every session summarised in one query (the ``SummarisesSessions`` fast path):
        only each session's newest record is decoded."""
        query = self._sql(SUMMARIES.format(table="{s}.checkpoints"))
        rows = self._run(lambda db: db.execute(query).fetchall(), what="summarise sessions")
        return summaries_of(rows)

    def ids(self) -> builtins.list[str]:
        """Every stored checkpoint id, damaged records included, oldest first.

        Not part of the protocol: what ``actorflow checkpoints verify`` counts.
        """
        query = self._sql("SELECT id FROM {s}.checkpoints ORDER BY id")
        return [r[0] for r in self._run(lambda db: db.execute(query).fetchall(), what="list ids")]

    def delete(self, checkpoint_id: str) -> None:
        """Delete a record (damaged or not) and collect unreferenced blobs."""
        check_checkpoint_id(checkpoint_id)

        def run(db: Conn) -> None:
            with db.transaction():
                db.execute(self._q_lock_excl)
                if not self._collect(db, [checkpoint_id]):
                    raise not_found(checkpoint_id)

        self._run(run, what=f"delete checkpoint {checkpoint_id}", retry=False)

    def prune(self, session: str, keep: int) -> int:
        """Keep the newest ``keep`` cuts of ``session`` (see CheckpointStore.prune)."""
        check_session_id(session, "session")
        check_keep(keep)
        query = self._sql("SELECT id, kind, parent_id FROM {s}.checkpoints WHERE session = %s")

        def run(db: Conn) -> int:
            with db.transaction():
                db.execute(self._q_lock_excl)
                rows = db.execute(query, (session,)).fetchall()
                return self._collect(db, prune_plan(rows, keep))

        return self._run(run, what=f"prune session {session}", retry=False)

    def prune_older_than(self, cutoff: float, *, whole_sessions: bool = False) -> int:
        """Remove records by age (see CheckpointStore.prune_older_than)."""
        limit = check_cutoff(cutoff)
        query = self._sql(
            "SELECT id, session, kind, parent_id, created_at FROM {s}.checkpoints"
            " WHERE session IN (SELECT session FROM {s}.checkpoints WHERE created_at < %s)"
        )

        rows_for, open_among, rows_gone = map(self._sql, (ROWS_FOR, OPEN_AMONG, ROWS_GONE))

        def run(db: Conn) -> int:
            with db.transaction():
                db.execute(self._q_lock_excl)
                rows = db.execute(query, (limit,)).fetchall()
                idle = sorted(idle_sessions(rows, limit)) if whole_sessions else []
                if not idle:  # thinning; or no session to delete whole
                    return self._collect(db, age_plan(rows, limit, whole_sessions=whole_sessions))
                # No lease of an idle session is granted until this commits.
                given = [session for (session,) in db.execute(rows_for, (idle,)).fetchall()]
                held = {session for (session,) in db.execute(open_among, (idle,)).fetchall()}
                doomed = age_plan(rows, limit, whole_sessions=True, open_sessions=held)
                removed = self._collect(db, doomed)
                if given:
                    db.execute(rows_gone, (given,))
                return removed

        return self._run(run, what="prune by age", retry=False)

    def close(self) -> None:
        """Close the store's own pool (a pool the caller passed stays open). Idempotent.

        Calls in flight keep the connections they hold and finish (psycopg_pool closes
        a connection in use when it is returned); calls waiting for a connection, and
        every later call, raise StoreClosed. Waits at most 5 s for the pool's workers.
        """
        self._connections.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def verify(self) -> builtins.list[str]:
        """Every problem found in the store, one line each; [] when healthy."""
        return self._verifier.verify()

    # --- leases (see CheckpointStore.acquire_lease) --------------------------------

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> Lease:
        """Take the session if no live lease holds it (see CheckpointStore.acquire_lease).

        By the server's clock; ``lock_wait`` bounds the wait for the session's advisory
        lock (see ``PostgresLeases.acquire``).
        """
        return self._leases.acquire(session, owner, ttl, lock_wait=lock_wait)

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend a current lease (see CheckpointStore.renew_lease)."""
        return self._leases.renew(lease, ttl)

    def release_lease(self, lease: Lease) -> None:
        """End a current lease; a stale one is ignored (see CheckpointStore.release_lease)."""
        self._leases.release(lease)

    def current_lease(self, session: str) -> Lease | None:
        """The live lease of ``session`` by the server's clock, or None."""
        return self._leases.current(session)

    def request_cancel(self, session: str, run_id: str) -> bool:
        """Note a cancel of ``run_id`` for the holder of ``session`` (see CancelRequests)."""
        return self._leases.request_cancel(session, run_id)

    # --- internals -----------------------------------------------------------------

    def _collect(self, db: Conn, ids: builtins.list[str]) -> int:
        """Delete records (caller holds the exclusive lock) and the blobs nothing else uses."""
        if not ids:
            return 0
        q = self._sql
        rows = db.execute(
            q("DELETE FROM {s}.checkpoints WHERE id = ANY(%s) RETURNING blob_ids"), (ids,)
        ).fetchall()
        if not rows:
            return 0
        db.execute(
            q("INSERT INTO {s}.deleted (id) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING"),
            (ids,),
        )
        candidates = sorted({b for (blob_ids,) in rows for b in blob_ids if b is not None})
        if candidates:
            db.execute(
                q(
                    "DELETE FROM {s}.blobs WHERE id = ANY(%s::bigint[]) AND id NOT IN (SELECT"
                    " unnest(blob_ids) FROM {s}.checkpoints WHERE blob_ids && %s::bigint[])"
                ),
                (candidates, candidates),
            )
        return len(rows)

    def _refused(
        self, db: Conn, cp: Checkpoint, digests: builtins.list[str], lease: Lease | None
    ) -> CheckpointError:
        """Why a save inserted nothing (its transaction rolled back): the lease check
        fails, the id is taken, or a referenced blob is missing."""
        with db.transaction():
            row, now = self._leases.read(db, cp.session)
            if lease is not None:
                fence(row, lease, cp.session, cp.id)
            else:
                leaseless_check(row, cp.session, cp.id, now)
            if self._stored_record(db, cp.id) is not None:
                return already_stored(cp.id)
            found = {r[0] for r in db.execute(self._q_blob_ids, (digests,)).fetchall()}
        missing = [d for d in digests if d not in found]
        if missing:
            return dangling(cp.id, missing)
        return CheckpointError(
            f"checkpoint {cp.id} was not saved: the session's lease or a blob it names "
            "changed while the save ran, and nothing was written; save it again"
        )

    def _stored_record(self, db: Conn, checkpoint_id: str) -> bytes | None:
        row = db.execute(self._q_record, (checkpoint_id,)).fetchone()
        return None if row is None else bytes(row[0])

    def _init_schema(self, create: bool) -> None:
        where = f"PostgresStore {self._where} schema {self._schema!r}"
        cancels = self._run(
            lambda db: open_schema(db, self._sql, where, create=create), what="open its schema"
        )
        self._leases = PostgresLeases(self._connections, self._sql, cancels=cancels)


def _redact(dsn: str) -> str:
    """The DSN without its password, for messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    info.pop("password", None)
    host, port, name = info.get("host", "localhost"), info.get("port", "5432"), info.get("dbname")
    return (
        f"postgresql://{info.get('user', '') and str(info['user']) + '@'}{host}:{port}/{name or ''}"
    )
