"""actorflow.storage: checkpoint records, the CheckpointStore protocol and its backends.

Bytes in, bytes out: a store persists plain checkpoint records and
content-addressed blobs atomically, and what it hands back is the caller's own.
``actorflow.storage.conformance`` (requires pytest) is the test kit every backend
passes; see ``docs/storage.md``.
"""

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
from ._memory import MemoryStore
from ._protocol import BlobBatchReader, CheckpointStore
from ._sqlite import SQLiteStore

__all__ = [
    "FORMAT_VERSION",
    "BlobBatchReader",
    "Checkpoint",
    "CheckpointKind",
    "CheckpointStore",
    "FileStore",
    "Lease",
    "MemoryStore",
    "SQLiteStore",
    "blob_digest",
    "decode_checkpoint",
    "encode_checkpoint",
    "new_checkpoint_id",
]
