"""Creating PostgresStore's schema on first use, and upgrading an older one in place."""

from __future__ import annotations

from typing import Any

import psycopg

from actorflow.errors import CheckpointCorrupt, StoreNotFound, UnsupportedFormat

from . import _sql as sql

Conn = psycopg.Connection[Any]


def open_schema(db: Conn, q: sql.Statements, where: str, *, create: bool = True) -> bool:
    """Make ``q.schema`` hold the current tables: create (unless ``create`` is false),
    upgrade, or check them. Returns whether it holds :data:`~._sql.CANCELS` (a schema
    an older actorflow made gets it now, unless the role may not create it).

    Raises:
        StoreNotFound: ``create`` is false and the schema holds no actorflow tables.
        UnsupportedFormat: the schema is newer than this actorflow, or older without
            an upgrade path.
        CheckpointCorrupt: its version table is damaged.
    """
    version_of = q("SELECT max(version) FROM {s}.actorflow_schema")
    table = f"{q.schema}.actorflow_schema"
    index = f"{q.schema}.checkpoints_by_parent"
    cancels = f"{q.schema}.cancels"
    with db.transaction():
        exists = db.execute(
            "SELECT to_regclass(%s), to_regclass(%s), to_regclass(%s)", (table, index, cancels)
        ).fetchone()
        if exists is not None and exists[0] is not None:
            version = db.execute(version_of).fetchone()
            if version is not None and version[0] == sql.SCHEMA_VERSION:
                if exists[1] is None or exists[2] is None:  # an older actorflow's, same version
                    db.execute(f"SELECT pg_advisory_xact_lock({sql.LOCK_INIT}, {q.key})")
                    return _added(db, q)
                return True  # the common case: no lock, no DDL
        if not create and (exists is None or exists[0] is None):
            raise StoreNotFound(
                f"{where}: no actorflow store there (no schema {q.schema!r} with actorflow's "
                "tables in this database); check the schema name (?schema=NAME on the "
                "command line; the default is actorflow) and the database (nothing was created)"
            )
        # Several processes may open a new database at once: one creates or
        # upgrades, the others wait here and then find it done.
        db.execute(f"SELECT pg_advisory_xact_lock({sql.LOCK_INIT}, {q.key})")
        db.execute(q("CREATE SCHEMA IF NOT EXISTS {s}"))
        exists = db.execute("SELECT to_regclass(%s)", (table,)).fetchone()
        if exists is None or exists[0] is None:
            db.execute(q("CREATE TABLE {s}.actorflow_schema (version integer NOT NULL)"))
            for statement in sql.TABLES:
                db.execute(q(statement))
            try:
                with db.transaction():  # a savepoint: the server may lack lz4
                    db.execute(q(sql.FAST_COMPRESSION))
            except psycopg.Error:
                pass  # the server's default compression (pglz) then
            db.execute(
                q("INSERT INTO {s}.actorflow_schema (version) VALUES (%s)"), (sql.SCHEMA_VERSION,)
            )
            return True
        row = db.execute(version_of).fetchone()
        upgrade(db, q, where, row[0] if row else None)
        return _added(db, q)


def _added(db: Conn, q: sql.Statements) -> bool:
    """Add :data:`~._sql.PARENT_INDEX` and :data:`~._sql.CANCELS` to a schema an older
    actorflow made; returns whether the schema now holds ``cancels``.

    Building the index holds a lock that makes saves wait, once, for as long as the
    build takes. A role that may not create them leaves the schema without them:
    without the index reads stay right, and their check of children scans the table
    instead; without ``cancels`` the store carries no cancel requests.
    """
    try:
        with db.transaction():  # a savepoint: the role may lack the privilege
            db.execute(q(sql.PARENT_INDEX))
    except psycopg.errors.InsufficientPrivilege:
        pass
    try:
        with db.transaction():
            db.execute(q(sql.CANCELS))
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True


def upgrade(db: Conn, q: sql.Statements, where: str, version: object) -> None:
    """Apply :data:`UPGRADES` from ``version`` to the current one (caller holds the lock)."""
    if not isinstance(version, int):
        raise CheckpointCorrupt(f"{where} has a damaged version table ({version!r})")
    if version > sql.SCHEMA_VERSION:
        raise UnsupportedFormat(
            f"{where} has actorflow schema {version}; this actorflow reads schema "
            f"{sql.SCHEMA_VERSION}. Upgrade actorflow."
        )
    if version < sql.SCHEMA_VERSION and version not in sql.UPGRADES:
        raise UnsupportedFormat(
            f"{where} has actorflow schema {version}, and this actorflow has no upgrade "
            "from it. Open it with the version that wrote it."
        )
    while version < sql.SCHEMA_VERSION:
        for statement in sql.UPGRADES[version]:
            db.execute(q(statement))
        version += 1
    db.execute(q("UPDATE {s}.actorflow_schema SET version = %s"), (version,))
