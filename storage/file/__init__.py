"""FileStore: checkpoints as segments and packs in a folder on a local POSIX file system.

The store (``_store``) is composed of collaborators that each own their state: the
segments this handle appends to and reads (``_segment``, ``_segments``), the packs
and their in-process index (``_pack``, ``_packindex``), the blob reads
(``_blobs``), the session leases (``_leases``) and the layout and collection
(``_gc``). The names below are what other families use: the store, the layout
marker the CLI recognises, and the kit's damage hooks (``actorflow.storage.conformance``).
"""

from ._gc import FILESTORE_MARKER
from ._leases import LEASES, lease_key
from ._pack import mutate_pack
from ._segment import SEGMENT_SUFFIX, mutate_segment
from ._store import FileStore

__all__ = [
    "FILESTORE_MARKER",
    "LEASES",
    "SEGMENT_SUFFIX",
    "FileStore",
    "lease_key",
    "mutate_pack",
    "mutate_segment",
]
