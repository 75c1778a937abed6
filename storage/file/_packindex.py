"""The in-process index of a FileStore's packs: which pack holds which blob, where.

Nothing on disk maps a digest to its pack; the headers of the packs do, and this
index caches them, so a save does not re-read any file to learn what is stored.

Why the cache cannot go stale unnoticed: packs are immutable, and only a collection
(``delete`` / ``prune``, holding the exclusive ``flock``) renames or unlinks them.
Every collection first writes a new random token into the lock file (``.lock``,
whose content nothing else uses; a save already has it open to take its ``flock``,
so reading the token costs one ``pread``). The index is filled and consulted for
decisions only under the store lock (shared or exclusive), and each such use
starts with :meth:`PackIndex.sync`, which drops the whole cache when the token
changed. So what the index says was read while no
collection could run, and no collection has started since. Lock-free readers only
use it as a hint: a pack gone or replaced under them sends them back through the
locked path.

The token also tells lock-free listings whether a collection overtook them (a
seqlock): a collection writes a token marked *collecting* before it moves anything
and a fresh unmarked one when it is done, so a listing that read the same unmarked
token before and after saw no collection at work (see ``FileStore._ids``).

The token is a signal between live processes, not durable state: after a crash
every process starts with an empty cache, so it is written without fsync (a
collection that died leaves its mark, and listings take the lock until the next
collection clears it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from pathlib import Path

from actorflow.errors import CheckpointCorrupt

from ._pack import BLOBS_SUFFIX, RECORD_SUFFIX, PackHeader, open_pack, read_header
from ._segment import SEGMENT_SUFFIX, Frame, scan_segment

ReadFrames = Callable[[str, int], tuple[list[Frame], int] | None]
"""(segment, inode) -> its frames as another reader of the folder already read them, in
file order from the start without a gap, and where they end; or None."""

TOKEN_SIZE = 16


def is_collecting(token: bytes | None) -> bool:
    """Whether a collection was under way (or died half-way) when ``token`` was read."""
    return token is not None and len(token) > 0 and bool(token[0] & 1)


def is_pack_name(name: str) -> bool:
    """Whether a file name in the packs folder is a pack (record or blob-only)."""
    return not name.startswith(".") and name.endswith((RECORD_SUFFIX, BLOBS_SUFFIX, SEGMENT_SUFFIX))


class PackIndex:
    """Digest -> (pack, span) for the packs of one folder, plus packs that cannot be read."""

    def __init__(self, folder: Path, read_frames: ReadFrames | None = None) -> None:
        self._folder = folder
        self._read_frames = read_frames
        """The store's record index (layout 3), which reads every segment anyway: a
        segment it read need not be scanned again here (a resume scanned each of W4's
        segments twice, ~0.8 ms of it on a FileStore)."""
        self._lock = threading.Lock()
        self._generation: bytes | None = None
        self._packs: dict[str, PackHeader] = {}
        self._where: dict[str, str] = {}
        self.damaged: dict[str, tuple[int, str]] = {}
        """Pack name -> (inode, why): packs whose header cannot be read."""
        # Segment name -> (inode, size) when last read: one ending in a torn tail is
        # read again only once it changed (the search past a torn tail reads it all).
        self._scanned: dict[str, tuple[int, int]] = {}

    @property
    def generation(self) -> bytes | None:
        """The collection token the index was last synced with (see :meth:`sync`)."""
        return self._generation

    def sync(self, lock_fd: int | None) -> None:
        """Drop the cache if a collection started since it was filled. Caller holds the lock.

        ``None``: no lock file (a store on a read-only file system that was never
        written here, where no collection can run).
        """
        token = b"" if lock_fd is None else os.pread(lock_fd, TOKEN_SIZE, 0)
        with self._lock:
            if token != self._generation:
                self._generation = token
                self._packs.clear()
                self._where.clear()
                self.damaged.clear()
                self._scanned.clear()

    def bump(self, lock_fd: int) -> None:
        """Announce a collection to every handle: a new token, marked as collecting.
        Caller holds the exclusive lock."""
        self._write_token(lock_fd, collecting=True)

    def settle(self, lock_fd: int) -> None:
        """Announce that the collection is over: a new token, unmarked. Caller holds
        the exclusive lock."""
        self._write_token(lock_fd, collecting=False)

    def _write_token(self, lock_fd: int, *, collecting: bool) -> None:
        # In place, so the lock file keeps its inode (flocks are on it). A lock-free
        # reader (a listing) may see half a token: it differs from the old one, and
        # the reader goes on under the lock (see is_collecting).
        token = bytearray(os.urandom(TOKEN_SIZE))
        token[0] = token[0] | 1 if collecting else token[0] & ~1
        os.pwrite(lock_fd, bytes(token), 0)
        self.sync(lock_fd)

    def scan(self) -> None:
        """Index packs that appeared since the last scan, forget vanished ones. Caller holds the lock."""
        with os.scandir(self._folder) as entries:
            listed = {e.name: e.inode() for e in entries if is_pack_name(e.name)}
        self._grow_segments(listed)
        with self._lock:
            gone = [n for n, h in self._packs.items() if listed.get(n) != h.inode]
            for name in gone:
                del self._packs[name]
            for name in [n for n, (ino, _) in self.damaged.items() if listed.get(n) != ino]:
                del self.damaged[name]
            for name in [n for n, (ino, _) in self._scanned.items() if listed.get(n) != ino]:
                del self._scanned[name]
            if gone:
                self._rebuild_where()
            new = [n for n in sorted(listed) if n not in self._packs and n not in self.damaged]
        folder = os.fspath(self._folder)
        for name in new:
            if name.endswith(SEGMENT_SUFFIX):
                self._read_segment(name)
                continue
            try:
                # Only the header is wanted: a small first read (it grows if needed).
                header, _ = read_header(os.path.join(folder, name), 2048)
            except FileNotFoundError:
                continue  # a crashed writer's leftover was removed meanwhile; nothing lost
            except CheckpointCorrupt as exc:
                with self._lock:
                    self.damaged[name] = (listed[name], str(exc))
                continue
            self.add(name, header)

    def read_named(self, names: list[str]) -> None:
        """Index these packs (those not indexed yet) by reading their headers. Caller holds the lock.

        What a hint names may be gone (collected) or no pack at all; both are skipped,
        so a stale hint only means the caller falls back to :meth:`scan`.
        """
        folder = os.fspath(self._folder)
        with self._lock:
            # A segment may have grown since it was read: read its new frames.
            new = [
                n
                for n in names
                if is_pack_name(n) and (n not in self._packs or n.endswith(SEGMENT_SUFFIX))
            ]
        for name in new:
            if name.endswith(SEGMENT_SUFFIX):
                self._read_segment(name)
                continue
            try:
                header, _ = read_header(os.path.join(folder, name), 2048)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                continue
            except CheckpointCorrupt as exc:
                with self._lock:
                    self.damaged[name] = (header_inode(folder, name), str(exc))
                continue
            self.add(name, header)

    def add_frame(self, segment: str, header: PackHeader, end: int) -> None:
        """Record a frame (ending at ``end``) appended to ``segment`` or read from it, under the lock.

        The segment's entry has no record and every blob of the frames indexed so
        far; its ``end`` is where the frames not indexed yet start.
        """
        with self._lock:
            known = self._packs.get(segment)
            if known is None or known.inode != header.inode:
                known = PackHeader(header.inode, (0, 0), {}, 0)
            blobs = dict(known.blobs)
            for digest, span in header.blobs.items():
                blobs.setdefault(digest, span)
                self._where.setdefault(digest, segment)
            self._packs[segment] = PackHeader(known.inode, (0, 0), blobs, max(known.end, end))

    def _grow_segments(self, listed: dict[str, int]) -> None:
        """Read the frames appended to indexed segments since they were read."""
        with self._lock:
            grown = [
                n
                for n, h in self._packs.items()
                if n.endswith(SEGMENT_SUFFIX) and listed.get(n) == h.inode
            ]
        for name in grown:
            self._read_segment(name)

    def _read_segment(self, name: str) -> None:
        """Index the frames of a segment not indexed yet (all of them, for a new one)."""
        with self._lock:
            known = self._packs.get(name)
        try:
            fd, st = open_pack(self._folder / name)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return
        except CheckpointCorrupt as exc:
            with self._lock:
                self.damaged[name] = (header_inode(os.fspath(self._folder), name), str(exc))
            return
        try:
            start = known.end if known is not None and known.inode == st.st_ino else 0
            if start == st.st_size and known is not None:
                return
            with self._lock:
                if self._scanned.get(name) == (st.st_ino, st.st_size):
                    return  # read at this size already: nothing was appended
            read = self._read_frames(name, st.st_ino) if self._read_frames else None
            if read is not None and read[1] > start:
                for frame in read[0]:
                    if frame.start >= start and frame.header is not None:
                        self.add_frame(name, frame.header, frame.end)
                start = read[1]  # the rest, if anything was appended since, is read here
            scan = scan_segment(fd, name, st.st_ino, st.st_size, start, record_names=False)
        finally:
            os.close(fd)
        for frame in scan.frames:
            if frame.header is not None:
                self.add_frame(name, frame.header, frame.end)
        with self._lock:
            if name not in self._packs:
                self._packs[name] = PackHeader(st.st_ino, (0, 0), {}, scan.end)
            if scan.damage:
                self.damaged[name] = (st.st_ino, scan.damage)
            self._scanned[name] = (st.st_ino, st.st_size)

    def locations(self, digests: AbstractSet[str]) -> set[str]:
        """The names of the indexed packs holding these digests (those it knows)."""
        with self._lock:
            return {self._where[d] for d in digests if d in self._where}

    def add(self, name: str, header: PackHeader) -> None:
        """Record a pack this handle wrote or read under the lock."""
        with self._lock:
            self._packs[name] = header
            for digest in header.blobs:
                self._where.setdefault(digest, name)

    def locate(self, digest: str) -> tuple[str, int, tuple[int, int]] | None:
        """(pack name, inode, span) of a blob, or None if the index does not know it."""
        with self._lock:
            name = self._where.get(digest)
            if name is None:
                return None
            header = self._packs[name]
            return name, header.inode, header.blobs[digest]

    def known(self, digests: AbstractSet[str]) -> set[str]:
        """The subset of ``digests`` the index knows a pack for."""
        with self._lock:
            return {d for d in digests if d in self._where}

    def packs(self) -> dict[str, PackHeader]:
        """A copy of name -> header for every readable indexed pack."""
        with self._lock:
            return dict(self._packs)

    def _rebuild_where(self) -> None:
        self._where.clear()
        for name, header in sorted(self._packs.items()):
            for digest in header.blobs:
                self._where.setdefault(digest, name)


def header_inode(folder: str, name: str) -> int:
    """The inode of a pack (0 if it vanished): how :meth:`PackIndex.scan` tells packs apart."""
    try:
        return os.stat(os.path.join(folder, name)).st_ino
    except OSError:
        return 0
