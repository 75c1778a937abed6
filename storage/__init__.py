"""actorflow.storage: checkpoint records, the CheckpointStore protocol and its backends.

Bytes in, bytes out: a store persists plain checkpoint records and
content-addressed blobs atomically, and what it hands back is the caller's own.
``actorflow.storage.conformance`` (requires pytest) is the test kit every backend
passes; see ``docs/storage.md``.
"""

from typing import TYPE_CHECKING

from ._cut import (
    EMPTY_METADATA,
    Cut,
    ExecutorDigests,
    cut_saver,
    metadata_with,
    packed_metadata,
)
from ._file import FileStore
from ._file_gc import MARKER as FILESTORE_MARKER
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
    "EMPTY_METADATA",
    "FILESTORE_MARKER",
    "FORMAT_VERSION",
    "BlobBatchReader",
    "Checkpoint",
    "CheckpointKind",
    "CheckpointStore",
    "Cut",
    "ExecutorDigests",
    "FileStore",
    "Lease",
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "blob_digest",
    "bounded_waits",
    "cut_saver",
    "decode_checkpoint",
    "encode_checkpoint",
    "lock_bound",
    "metadata_with",
    "new_checkpoint_id",
    "packed_metadata",
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
