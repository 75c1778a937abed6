"""PostgresStore's schema, its upgrades, and the SQL it runs, apart from connections.

Every statement names its tables through the store's schema (an option), so several
stores share one database. Statements are plain strings built once per store, so
psycopg prepares the hot ones on the server after a few uses.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from actorflow.storage._sql import COLUMNS

SCHEMA_VERSION = 1
"""The layout below. A store refuses a newer one and upgrades an older one in place
(see :data:`UPGRADES`), under the schema lock, when it is opened."""


def prefixed(alias: str) -> str:
    """:data:`COLUMNS` of the table named ``alias`` in a query."""
    return ", ".join(f"{alias}.{c.strip()}" for c in COLUMNS.split(","))


SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""Accepted schema names: unquoted PostgreSQL identifiers, so the name is safe to
place in SQL text as it is (and means the same in psql)."""

# Advisory lock keys (two int4 keys: a purpose, and the schema name's crc32), so
# stores in other schemas of the database never wait for each other.
LOCK_INIT = 0x6166_0001
"""Held (transaction-level, exclusive) while the schema is created or upgraded."""
LOCK_DATA = 0x6166_0002
"""Shared by saves, exclusive for delete/prune: a collection never removes a blob
that a concurrent save has found stored and is about to reference."""

CANCELS = """CREATE TABLE IF NOT EXISTS {s}.cancels (
        session text PRIMARY KEY,
        token   bigint NOT NULL,
        run     text NOT NULL
    )"""
"""Cancel requests (``request_cancel``, see ``CancelRequests``): the run another process
asked the holder of a session's lease to cancel, and that lease's token (a new grant
has another token, so it starts without a request). A row stays until the next
request of its session replaces it. Not a schema version of its own, like
:data:`PARENT_INDEX`: older actorflow versions ignore it, and opening a schema without
it creates it (see ``_schema``)."""

PARENT_INDEX = "CREATE INDEX IF NOT EXISTS checkpoints_by_parent ON {s}.checkpoints (parent_id)"
"""Reads check the children of what they return (see ``actorflow.storage._sql.check_left_out``). Not a
schema version of its own: older actorflow versions read and write the schema as they
did, and opening a schema without it creates it (see ``_schema``)."""

# ``checkpoints.blob_ids`` lists the blob rows a record references (integers: a
# record names every chunk of every executor, and 64-character digests would cost
# more than the changed chunks). No index by blob: collection scans the arrays once
# per delete/prune rather than every save paying for a GIN index.
# ``leases`` holds one row per session that ever had a lease; the row stays after a
# release so the next token is strictly greater (fencing tokens are never reused).
# ``expires_at`` is epoch seconds by the server's clock (``date_part('epoch', now())``).
TABLES = (
    """CREATE TABLE {s}.checkpoints (
        id         text PRIMARY KEY,
        session    text NOT NULL,
        workflow   text NOT NULL,
        kind       text NOT NULL,
        superstep  bigint NOT NULL,
        created_at double precision NOT NULL,
        parent_id  text,
        record     bytea NOT NULL,
        blob_ids   bigint[] NOT NULL
    )""",
    "CREATE INDEX checkpoints_by_session ON {s}.checkpoints (session, id)",
    PARENT_INDEX,
    """CREATE TABLE {s}.blobs (
        id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        digest text NOT NULL UNIQUE,
        data   bytea NOT NULL
    )""",
    "CREATE TABLE {s}.deleted (id text PRIMARY KEY)",
    """CREATE TABLE {s}.leases (
        session    text PRIMARY KEY,
        token      bigint NOT NULL,
        owner      text NOT NULL,
        expires_at double precision NOT NULL,
        released   boolean NOT NULL DEFAULT false
    )""",
    CANCELS,
)

FAST_COMPRESSION = "ALTER TABLE {s}.blobs ALTER COLUMN data SET COMPRESSION lz4"
"""Chunks are left to TOAST compression (state is often text-heavy msgpack: W3's
chunks shrink ~3x, 3.0 MB stored -> 1.0 MB); lz4 where the server has it (PostgreSQL
14+ built with lz4) costs less CPU per save than the default pglz."""

UPGRADES: dict[int, tuple[str, ...]] = {}
"""Version n -> the statements that turn schema n into n + 1. Applied in order, in
the opening transaction, under :data:`LOCK_INIT`; empty while there is one version."""


@dataclass(frozen=True, slots=True)
class Statements:
    """The SQL text of one store, with its schema name filled in."""

    schema: str

    def __post_init__(self) -> None:
        if not SCHEMA_NAME.fullmatch(self.schema):
            raise ValueError(
                f"PostgresStore schema name {self.schema!r} is not a plain lowercase SQL "
                "identifier (letters, digits, underscore; at most 63); pick one like 'actorflow'"
            )

    @property
    def key(self) -> int:
        """The schema's advisory lock key: its crc32 as a signed int4."""
        value = zlib.crc32(self.schema.encode())
        return value - (1 << 32) if value >= 1 << 31 else value

    def __call__(self, text: str) -> str:
        return text.replace("{s}", self.schema)
