"""actorflow.storage: checkpoint records, the CheckpointStore protocol and its backends.

Bytes in, bytes out: a store persists plain checkpoint records and
content-addressed blobs atomically, and what it hands back is the caller's own.
``actorflow.storage.conformance`` (requires pytest) is the test kit every backend
passes; see ``docs/storage.md``.
"""

from typing import TYPE_CHECKING

from actorflow.errors import MissingExtra

from ._fast_paths import SummarisesSessions, session_summaries
from ._format import (
    FORMAT_VERSION,
    Checkpoint,
    CheckpointKind,
    blob_digest,
    decode_checkpoint,
    encode_checkpoint,
    new_checkpoint_id,
)
from ._history import HistoryEntry
from ._lease import Lease
from ._memory import MemoryStore
from ._protocol import BlobBatchReader, CancelRequests, CheckpointStore
from ._statements import CommitsStatements, SqlValue, Statement
from ._summary import SessionSummary
from ._wrapper import StoreWrapper
from .encrypted import EncryptedStore
from .file import FileStore
from .sqlite import SQLiteStore

# The runtime's seam into storage: the supervisor's write path (the cut record, its
# saver, and the optional fast paths a store declares: SavesCuts, VolatileStore), the
# bound on lock waits, the FileStore marker the CLI recognises. Importable from the
# package so no one reaches into its private modules, but not in __all__: they are
# not part of the public API.
# isort: split
from ._common import check_session_id as check_session_id
from ._cut import EMPTY_METADATA as EMPTY_METADATA
from ._cut import Cut as Cut
from ._cut import ExecutorDigests as ExecutorDigests
from ._cut import metadata_with as metadata_with
from ._cut import packed_metadata as packed_metadata
from ._fast_paths import SavesCuts as SavesCuts
from ._fast_paths import VolatileStore as VolatileStore
from ._fast_paths import cut_saver as cut_saver
from ._fast_paths import is_volatile as is_volatile
from ._history import RawEntry as RawEntry
from ._lock_wait import bounded_waits as bounded_waits
from ._lock_wait import lock_bound as lock_bound
from ._statements import StatementSaver as StatementSaver
from ._statements import sql_dialect as sql_dialect
from ._statements import statement_failed as statement_failed
from ._statements import statement_saver as statement_saver
from .encrypted import is_sealed as is_sealed
from .file import FILESTORE_MARKER as FILESTORE_MARKER

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "FORMAT_VERSION",
    "BlobBatchReader",
    "CancelRequests",
    "Checkpoint",
    "CheckpointKind",
    "CheckpointStore",
    "CommitsStatements",
    "EncryptedStore",
    "FileStore",
    "HistoryEntry",
    "Lease",
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "SessionSummary",
    "SqlValue",
    "Statement",
    "StoreWrapper",
    "SummarisesSessions",
    "blob_digest",
    "decode_checkpoint",
    "encode_checkpoint",
    "new_checkpoint_id",
    "session_summaries",
]


def __getattr__(name: str) -> object:
    # PostgresStore needs the actorflow[postgres] extra: import it on first use only,
    # so `import actorflow` never imports psycopg.
    if name == "PostgresStore":
        try:
            from .postgres import PostgresStore  # noqa: PLC0415  # the extra is optional
        except ModuleNotFoundError as exc:
            raise MissingExtra("PostgresStore", "postgres", exc.name or "psycopg") from exc
        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
