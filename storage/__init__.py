"""actorflow.storage: checkpoint records, the CheckpointStore protocol and its backends.

Bytes in, bytes out: a store persists plain checkpoint records and
content-addressed blobs atomically, and what it hands back is the caller's own.
``actorflow.storage.conformance`` (requires pytest) is the test kit every backend
passes; see ``docs/storage.md``.
"""

from typing import TYPE_CHECKING

from ._file import FileStore
from ._format import (
    FORMAT_VERSION,
    Checkpoint,
    CheckpointKind,
    blob_digest,
    decode_checkpoint,
    encode_checkpoint,
    new_checkpoint_id,
)
from ._lease import Lease
from ._lock_wait import bounded_waits, lock_bound
from ._memory import MemoryStore
from ._protocol import BlobBatchReader, CheckpointStore
from ._sqlite import SQLiteStore

if TYPE_CHECKING:
    from ._postgres import PostgresStore

__all__ = [
    "FORMAT_VERSION",
    "BlobBatchReader",
    "Checkpoint",
    "CheckpointKind",
    "CheckpointStore",
    "FileStore",
    "Lease",
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "blob_digest",
    "bounded_waits",
    "decode_checkpoint",
    "encode_checkpoint",
    "lock_bound",
    "new_checkpoint_id",
]


def __getattr__(name: str) -> object:
    # PostgresStore needs the actorflow[postgres] extra: import it on first use only,
    # so `import actorflow` never imports psycopg.
    if name == "PostgresStore":
        try:
            from ._postgres import PostgresStore  # noqa: PLC0415  # the extra is optional
        except ImportError as exc:
            raise ImportError(
                f"PostgresStore needs psycopg 3 and psycopg_pool ({exc}); "
                "install them with: pip install 'actorflow[postgres]'"
            ) from exc
        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
