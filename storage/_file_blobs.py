"""FileStore's blob reads: finding blobs through the pack index and reading them.

A mixin of :class:`~._file.FileStore`, kept apart because it is one concern:
where a blob is (the in-process index of pack headers, the hints of the records
read lately, a full scan as the last resort) and reading it back, verified, with
each pack opened once per batch. The store provides the attributes declared here.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import os
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING

from actorflow.errors import CheckpointCorrupt, CheckpointError, CheckpointNotFound

from ._format import is_blob_digest, verify_blob
from ._pack import read_pack_hints, read_spans
from ._packindex import PackIndex
from ._segment import SEGMENT_SUFFIX

__all__ = ["FileBlobReads"]


class FileBlobReads:
    """Blob reads for FileStore (which provides the attributes declared here)."""

    _root: Path
    _packs: Path
    _index: PackIndex
    _recent: collections.deque[str]

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...

        def _locked(
            self, *, exclusive: bool, write: bool = True
        ) -> contextlib.AbstractContextManager[int | None]: ...

    def load_blob(self, digest: str) -> bytes:
        """The blob with this digest, verified (see CheckpointStore.load_blob)."""
        return self.load_blobs([digest])[digest]

    def load_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Several blobs, each verified, reading each pack once (see ``BlobBatchReader``).

        Raises:
            CheckpointNotFound: one of them is not stored.
            CheckpointCorrupt: one of them does not match its digest.
        """
        self._check_open()
        wanted = sorted(set(digests))
        for d in wanted:
            if not is_blob_digest(d):
                raise CheckpointNotFound(f"no blob {d!r} in this store")
        found = self._read_blobs(wanted)
        if found is None:  # a pack moved under us (a collection ran): look again, locked
            with self._locked(exclusive=False, write=False):
                self._index.scan()
                found = self._read_blobs(wanted)
        if found is None:
            raise CheckpointError(f"the packs of {self._root} kept changing while being read")
        missing = [d for d in wanted if d not in found]
        if missing:
            with self._locked(exclusive=False, write=False):
                self._stored(set(missing))
                more = self._read_blobs(missing)
            found.update(more or {})
        for d in wanted:
            if d not in found:
                raise self._blob_not_found(d)
        return {d: verify_blob(d, found[d]) for d in wanted}

    def has_blobs(self, digests: Iterable[str]) -> set[str]:
        """The subset of ``digests`` that is stored."""
        self._check_open()
        wanted = {d for d in digests if is_blob_digest(d)}
        with self._locked(exclusive=False, write=False):
            return self._stored(wanted)

    def _stored(self, digests: AbstractSet[str], also: AbstractSet[str] = frozenset()) -> set[str]:
        """Which of ``digests`` (and of ``also``, as far as indexed) some pack holds.

        Caller holds the lock. Digests of ``digests`` the index does not know make
        it look for packs written by other handles; those of ``also`` do not.
        """
        known = self._index.known(digests)
        if len(known) < len(digests):  # not indexed here yet: look on disk
            self._find(digests)
            known = self._index.known(digests)
        return known | self._index.known(also)

    def _find(self, digests: AbstractSet[str]) -> None:
        """Index the packs holding ``digests``, as far as stored. Caller holds the lock.

        The records read lately name, in their hints, the packs holding their blobs
        (a resume wants the blobs of the record it just loaded): reading those few
        headers usually suffices. Only if it does not (hints stale after a
        collection, a record without hints, blobs of another record) is every
        header read. Either way only headers read under the lock enter the index.
        """
        for name in reversed(list(self._recent)):  # a copy: other threads append
            if name.endswith(SEGMENT_SUFFIX):  # a segment holds most blobs of its records
                self._index.read_named([name])
                if len(self._index.known(digests)) == len(digests):
                    return
                continue
            try:
                _, hinted = read_pack_hints(os.path.join(self._packs, name))
            except (FileNotFoundError, CheckpointError):
                continue  # gone, damaged or unreadable: the scan below decides
            self._index.read_named([name, *hinted])
            if len(self._index.known(digests)) == len(digests):
                return
        self._index.scan()

    def _read_blobs(self, digests: builtins.list[str]) -> dict[str, bytes] | None:
        """The bytes of the indexed ones among ``digests``; None if a pack moved meanwhile."""
        by_pack: dict[tuple[str, int], builtins.list[tuple[str, tuple[int, int]]]] = {}
        for digest in digests:
            place = self._index.locate(digest)
            if place is not None:
                name, inode, span = place
                by_pack.setdefault((name, inode), []).append((digest, span))
        found: dict[str, bytes] = {}
        for (name, inode), wanted in sorted(by_pack.items()):
            try:
                data = read_spans(self._packs / name, inode, [span for _, span in wanted])
            except FileNotFoundError:
                return None
            if data is None:
                return None
            found.update(zip([d for d, _ in wanted], data, strict=True))
        return found

    def _blob_not_found(self, digest: str) -> CheckpointError:
        damaged = sorted(self._index.damaged)
        if damaged:
            return CheckpointCorrupt(
                f"no readable blob {digest!r} in this store; damaged pack(s) {', '.join(damaged)} "
                "may hold it (store.verify() lists every problem)"
            )
        return CheckpointNotFound(f"no blob {digest!r} in this store")

    def _blob_state(self, digest: str) -> str:
        try:
            self.load_blob(digest)
        except CheckpointNotFound:
            return "missing"
        except CheckpointCorrupt:
            return "corrupt"
        return "ok"
