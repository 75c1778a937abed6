"""Store factories for the conformance kit: how to open, reopen and damage each built-in store.

A factory is a zero-argument callable returning a store on the same data each time,
plus optional capabilities the kit looks up by name (see ``StoreFactory`` in
``actorflow.storage.conformance``). These three cover the built-in stores and are
examples for third parties; they need no pytest.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from actorflow.storage._lease import LeaseRow
from actorflow.storage._memory import MemoryStore
from actorflow.storage._protocol import CheckpointStore
from actorflow.storage.file import (
    LEASES,
    SEGMENT_SUFFIX,
    FileStore,
    lease_key,
    mutate_pack,
    mutate_segment,
)
from actorflow.storage.sqlite import SQLiteStore

Mutation = Callable[[bytes], bytes]
"""Turns the stored bytes of a record or blob into damaged bytes."""

_ROW_COLUMNS = frozenset({"id", "session", "workflow", "kind"})


@dataclass(frozen=True)
class MemoryStoreFactory:
    """Hands out one :class:`MemoryStore` every time: memory has no second handle.

    Not durable (closing it ends the data) and not shared across processes, so the
    reopen and multi-process tests do not apply to it: the kit skips them, or a
    test class leaves them out by setting those test names to None.
    """

    store: MemoryStore = field(default_factory=MemoryStore)
    durable: ClassVar[bool] = False
    multiprocess: ClassVar[bool] = False

    def __call__(self) -> MemoryStore:
        return self.store

    def corrupt_record(self, checkpoint_id: str, mutate: Mutation) -> None:
        """Replace the stored bytes of a record with ``mutate(bytes)``."""
        # The kit's damage hook reaches into the store on purpose: nothing else can.
        with self.store._lock:
            record = self.store._record(checkpoint_id)
            entry = self.store._index[checkpoint_id]
            self.store._index[checkpoint_id] = (mutate(record), *entry[1:])

    def corrupt_blob(self, digest: str, mutate: Mutation) -> None:
        """Replace the stored bytes of a blob with ``mutate(bytes)``."""
        with self.store._lock:
            self.store._blobs[digest] = mutate(self.store._blobs[digest])

    def set_lease_expiry(self, session: str, expires_at: float) -> bool:
        """Overwrite the expiry of the session's lease row (a damaged row); True: done."""
        with self.store._lock:
            row = self.store._leases[session]
            self.store._leases[session] = LeaseRow(row.token, row.owner, expires_at, row.released)
        return True


@dataclass(frozen=True)
class FileStoreFactory:
    """Opens a :class:`FileStore` on one folder; picklable, so child processes can too."""

    path: str
    durable: ClassVar[bool] = True
    multiprocess: ClassVar[bool] = True

    def __call__(self) -> FileStore:
        return FileStore(self.path)

    def corrupt_record(self, checkpoint_id: str, mutate: Mutation) -> None:
        """Rewrite the record in its pack (or its segment's frame) with ``mutate(its bytes)``."""
        packs = Path(self.path) / "packs"
        if (packs / f"{checkpoint_id}.pack").exists():
            mutate_pack(packs / f"{checkpoint_id}.pack", record=mutate)
            return
        for segment in sorted(packs.glob(f"*{SEGMENT_SUFFIX}")):
            if mutate_segment(segment, record=(checkpoint_id, mutate)):
                return

    def corrupt_blob(self, digest: str, mutate: Mutation) -> None:
        """Rewrite the blob, in every pack and segment that holds a copy, with ``mutate(its bytes)``."""
        for pack in sorted((Path(self.path) / "packs").iterdir()):
            if pack.name.startswith("."):
                continue
            if pack.name.endswith(SEGMENT_SUFFIX):
                mutate_segment(pack, blob=(digest, mutate))
            else:
                mutate_pack(pack, blob=(digest, mutate))

    def set_lease_expiry(self, session: str, expires_at: float) -> bool:
        """Overwrite the expiry in the session's lease file (JSON keeps NaN and Infinity)."""
        path = Path(self.path) / LEASES / f"{lease_key(session)}.lease"
        body = json.loads(path.read_bytes())
        body["expires_at"] = expires_at
        path.write_bytes(json.dumps(body).encode())
        return True

    def corrupt_header(self, mutate: Mutation) -> None:
        """Rewrite the prefix and header of every record pack with ``mutate(those bytes)``, and
        the first 96 bytes of every segment (its first frame's prefix, id and pack header)."""
        packs = Path(self.path) / "packs"
        for pack in sorted(packs.glob("*.pack")):
            data = pack.read_bytes()
            end = 16 + int.from_bytes(data[8:12], "big") if len(data) >= 16 else len(data)
            pack.write_bytes(mutate(data[:end]) + data[end:])
        for segment in sorted(packs.glob(f"*{SEGMENT_SUFFIX}")):
            data = segment.read_bytes()
            segment.write_bytes(mutate(data[:96]) + data[96:])


@dataclass(frozen=True)
class SQLiteStoreFactory:
    """Opens a :class:`SQLiteStore` on one file; picklable, so child processes can too."""

    path: str
    durable: ClassVar[bool] = True
    multiprocess: ClassVar[bool] = True

    def __call__(self) -> SQLiteStore:
        return SQLiteStore(self.path)

    def corrupt_record(self, checkpoint_id: str, mutate: Mutation) -> None:
        """Rewrite a record row's bytes with ``mutate(its bytes)``."""
        self._mutate("checkpoints", "record", "id", checkpoint_id, mutate)

    def corrupt_blob(self, digest: str, mutate: Mutation) -> None:
        """Rewrite a blob row's bytes with ``mutate(its bytes)``."""
        self._mutate("blobs", "data", "digest", digest, mutate)

    def set_lease_expiry(self, session: str, expires_at: float) -> bool:
        """Overwrite the expiry of the session's lease row; False for NaN, which a SQLite
        REAL cannot hold (it becomes NULL, and the column is NOT NULL)."""
        if math.isnan(expires_at):
            return False
        with contextlib.closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            db.execute("UPDATE leases SET expires_at = ? WHERE session = ?", (expires_at, session))
        return True

    def corrupt_header(self, mutate: Mutation) -> None:
        """Rewrite the 100-byte database header with ``mutate(its bytes)`` (the WAL folded in first)."""
        try:
            with contextlib.closing(sqlite3.connect(self.path, timeout=30)) as db:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.DatabaseError:
            pass  # damaged already (an earlier call): the header is in the file itself
        with open(self.path, "r+b") as f:
            header = f.read(100)
            f.seek(0)
            f.write(mutate(header)[:100].ljust(100, b"\0"))

    def corrupt_column(self, checkpoint_id: str, column: str, value: str) -> None:
        """Set one column of a record's row (``id``, ``session``, ``workflow``, ``kind``)."""
        if column not in _ROW_COLUMNS:
            raise ValueError(f"not a column a record's row is found by: {column!r}")
        with contextlib.closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            db.execute(f"UPDATE checkpoints SET {column} = ? WHERE id = ?", (value, checkpoint_id))

    def _mutate(self, table: str, column: str, key: str, value: str, mutate: Mutation) -> None:
        with contextlib.closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            (data,) = db.execute(
                f"SELECT {column} FROM {table} WHERE {key} = ?", (value,)
            ).fetchone()
            db.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (mutate(data), value))


@dataclass(frozen=True)
class PostgresStoreFactory:
    """Opens a :class:`PostgresStore` on one schema of a database; picklable.

    Needs the ``actorflow[postgres]`` extra (imported when first called, so this
    module stays importable without it).
    """

    dsn: str
    schema: str = "actorflow"
    durable: ClassVar[bool] = True
    multiprocess: ClassVar[bool] = True

    def __call__(self) -> CheckpointStore:
        from actorflow.storage.postgres import PostgresStore  # noqa: PLC0415  # the extra is optional

        return PostgresStore(self.dsn, schema=self.schema, pool_size=8)

    def corrupt_record(self, checkpoint_id: str, mutate: Mutation) -> None:
        """Rewrite a record row's bytes with ``mutate(its bytes)``."""
        self._mutate("checkpoints", "record", "id", checkpoint_id, mutate)

    def corrupt_blob(self, digest: str, mutate: Mutation) -> None:
        """Rewrite a blob row's bytes with ``mutate(its bytes)``."""
        self._mutate("blobs", "data", "digest", digest, mutate)

    def corrupt_header(self, mutate: Mutation) -> None:
        """Rewrite the schema's version row, what the store reads first on opening, with
        ``mutate(its value as 4 big-endian bytes)``."""
        import psycopg  # noqa: PLC0415  # the extra is optional

        table = f"{self._schema()}.actorflow_schema"
        with psycopg.connect(self.dsn) as db:  # one transaction, committed on exit
            row = db.execute(f"SELECT version FROM {table}").fetchone()
            assert row is not None, f"no version row in {table}"
            data = mutate(int(row[0]).to_bytes(4, "big", signed=True))[:4].rjust(4, b"\0")
            db.execute(
                f"UPDATE {table} SET version = %s", (int.from_bytes(data, "big", signed=True),)
            )

    def set_lease_expiry(self, session: str, expires_at: float) -> bool:
        """Overwrite the expiry of the session's lease row (float8 holds NaN and Infinity)."""
        import psycopg  # noqa: PLC0415  # the extra is optional

        with psycopg.connect(self.dsn) as db:  # one transaction, committed on exit
            db.execute(
                f"UPDATE {self._schema()}.leases SET expires_at = %s WHERE session = %s",
                (expires_at, session),
            )
        return True

    def corrupt_column(self, checkpoint_id: str, column: str, value: str) -> None:
        """Set one column of a record's row (``id``, ``session``, ``workflow``, ``kind``)."""
        import psycopg  # noqa: PLC0415  # the extra is optional

        if column not in _ROW_COLUMNS:
            raise ValueError(f"not a column a record's row is found by: {column!r}")
        where = f"{self._schema()}.checkpoints"
        with psycopg.connect(self.dsn) as db:  # one transaction, committed on exit
            db.execute(f"UPDATE {where} SET {column} = %s WHERE id = %s", (value, checkpoint_id))

    def _schema(self) -> str:
        from actorflow.storage.postgres import Statements  # noqa: PLC0415  # the extra is optional

        return Statements(self.schema).schema  # validated: safe to place in SQL text

    def _mutate(self, table: str, column: str, key: str, value: str, mutate: Mutation) -> None:
        import psycopg  # noqa: PLC0415  # the extra is optional

        where = f"{self._schema()}.{table}"
        with psycopg.connect(self.dsn) as db:  # one transaction, committed on exit
            row = db.execute(f"SELECT {column} FROM {where} WHERE {key} = %s", (value,)).fetchone()
            assert row is not None, f"no {table} row {value}"
            db.execute(
                f"UPDATE {where} SET {column} = %s WHERE {key} = %s", (mutate(bytes(row[0])), value)
            )
