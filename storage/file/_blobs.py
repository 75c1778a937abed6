"""FileStore's blob reads: finding blobs through the pack index and reading them.

:class:`FileBlobs` owns where a blob is looked for (the in-process index of pack
headers, the hints of the records read lately, a full scan as the last resort)
and reads blobs back, verified, with each pack opened once per batch. The store
holds one and delegates its blob methods to it.
"""

from __future__ import annotations

import builtins
import collections
import os
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from pathlib import Path

from actorflow.errors import CheckpointCorrupt, CheckpointError, CheckpointNotFound
from actorflow.storage._format import is_blob_digest, verify_blob

from ._lock import StoreLock
from ._pack import read_pack_hints, read_spans
from ._packindex import PackIndex
from ._segment import SEGMENT_SUFFIX

__all__ = ["FileBlobs"]

# Record packs read lately, whose hints say where their blobs are: a resume reads
# the blobs of the record it just loaded (see FileBlobs.find).
_RECENT_RECORDS = 4


class FileBlobs:
    """The blob reads of one FileStore handle.

    Args:
        root: the store's folder (for messages).
        packs: its ``packs`` folder.
        index: the handle's pack index.
        lock: the store lock, taken to look again when a pack moved or is unknown.
    """

    def __init__(self, root: Path, packs: Path, index: PackIndex, lock: StoreLock) -> None:
        self._root = root
        self._packs = packs
        self._index = index
        self._lock = lock
        self._recent: collections.deque[str] = collections.deque(maxlen=_RECENT_RECORDS)
        """The packs and segments of the records read lately, newest last."""

    def noted(self, name: str) -> None:
        """Note that a record was read from the pack or segment ``name`` (see :meth:`find`)."""
        if not self._recent or self._recent[-1] != name:
            self._recent.append(name)

    def load(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Several blobs, each verified, reading each pack once (see ``BlobBatchReader``).

        Raises:
            CheckpointNotFound: one of them is not stored.
            CheckpointCorrupt: one of them does not match its digest.
        """
        wanted = sorted(set(digests))
        for d in wanted:
            if not is_blob_digest(d):
                raise CheckpointNotFound(f"no blob {d!r} in this store")
        found = self._read(wanted)
        if found is None:  # a pack moved under us (a collection ran): look again, locked
            with self._lock.held(exclusive=False, write=False):
                self._index.scan()
                found = self._read(wanted)
        if found is None:
            raise CheckpointError(f"the packs of {self._root} kept changing while being read")
        missing = [d for d in wanted if d not in found]
        if missing:
            with self._lock.held(exclusive=False, write=False):
                self.stored(set(missing))
                more = self._read(missing)
            found.update(more or {})
        for d in wanted:
            if d not in found:
                raise self._blob_not_found(d)
        return {d: verify_blob(d, found[d]) for d in wanted}

    def has(self, digests: Iterable[str]) -> set[str]:
        """The subset of ``digests`` that is stored."""
        wanted = {d for d in digests if is_blob_digest(d)}
        with self._lock.held(exclusive=False, write=False):
            return self.stored(wanted)

    def stored(self, digests: AbstractSet[str], also: AbstractSet[str] = frozenset()) -> set[str]:
        """Which of ``digests`` (and of ``also``, as far as indexed) some pack holds.

        Caller holds the lock. Digests of ``digests`` the index does not know make
        it look for packs written by other handles; those of ``also`` do not.
        """
        known = self._index.known(digests)
        if len(known) < len(digests):  # not indexed here yet: look on disk
            self.find(digests)
            known = self._index.known(digests)
        return known | self._index.known(also)

    def find(self, digests: AbstractSet[str]) -> None:
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

    def _read(self, digests: builtins.list[str]) -> dict[str, bytes] | None:
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

    def state(self, digest: str) -> str:
        """``"ok"``, ``"missing"`` or ``"corrupt"``: what the store's ``verify`` reports of a blob."""
        try:
            self.load([digest])
        except CheckpointNotFound:
            return "missing"
        except CheckpointCorrupt:
            return "corrupt"
        return "ok"
