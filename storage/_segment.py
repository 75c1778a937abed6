"""FileStore segments (layout 3): one file per writer, its saves appended as frames.

A save in layout 2 creates a pack file: one fsync of the file and one of the folder
(the name becomes durable only with the folder's fsync). A save in layout 3 appends
the same pack, whole, to a file that already exists and whose name is durable, so
it costs ONE ``fdatasync``. Layout::

    packs/<random>.seg      created by one store handle (O_EXCL) when it first saves,
                            named durably (a folder fsync) before any frame is written;
                            only that handle ever appends to it
    frame                   b"AFSEGF01", id length (uint32), pack length (uint64),
                            crc32 of those two lengths and the id (uint32), the
                            checkpoint id (ASCII), then a pack exactly as in
                            ``_pack``: header, record, blobs, hints

The commit point of a save is its frame being whole. A writer appends a frame with
one write and then ``fdatasync``; a crash (or ``kill -9``) in between leaves a
frame that ends past the end of the file, and only the last frame of a file can be
in that state. Such a *torn tail* is a save that never returned: readers stop
before it (as they would before a temp file), and the next collection drops it.
Everything else is checked: a frame prefix whose magic or checksum is wrong stops
the file's reading and is damage (:attr:`SegmentScan.damage`), never a torn tail;
a pack header that does not check out is damage of that record (its id is known);
records and blobs carry their own digests, as in packs.

Deleting a record appends its id to the store's ``deleted`` list (the records of
a segment cannot be renamed away one by one); the collection then rewrites the
segments holding deleted records (see ``_file_gc``).
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from actorflow.errors import CheckpointCorrupt, CheckpointError

from ._base import store_closed
from ._pack import (
    TMP,
    PackHeader,
    encode_header,
    fsync_dir,
    mutate_pack_bytes,
    parse_header,
    write_all,
)

SEGMENT_SUFFIX = ".seg"
FRAME_MAGIC = b"AFSEGF01"
_FRAME = struct.Struct(">8sIQI")
_LENGTHS = struct.Struct(">IQ")
# Ids are file-name safe (see FileStore); the bound keeps a damaged length small.
_MAX_ID = 255
# One read usually covers a frame's prefix, id and pack header (more is read if not).
_FIRST_READ = 2048

__all__ = [
    "FRAME_MAGIC",
    "SEGMENT_SUFFIX",
    "Frame",
    "SegmentScan",
    "SegmentWriter",
    "encode_frame_prefix",
    "mutate_segment",
    "scan_segment",
    "shifted",
]


@dataclass(frozen=True, slots=True)
class Frame:
    """One record's frame in a segment."""

    checkpoint_id: str
    start: int
    """Offset of the frame's prefix."""
    header: PackHeader | None
    """The pack's header, spans relative to the segment file; None if it is damaged."""
    damage: str
    """Why the pack header cannot be read ("" if it can)."""
    end: int
    """Offset just past the frame (where the next one starts)."""


@dataclass(slots=True)
class SegmentScan:
    """What one read of a segment, from some offset to its end, found."""

    inode: int
    frames: list[Frame] = field(default_factory=list)
    end: int = 0
    """Offset just past the last whole frame read: where the next read starts."""
    torn: bool = False
    """A frame begins at ``end`` and runs past the end of the file."""
    damage: str = ""
    """Non-empty: the frame prefix at ``end`` is damaged; nothing after it can be read."""


def encode_frame_prefix(checkpoint_id: str, pack_length: int) -> bytes:
    """The prefix and id of a frame holding a pack of this length."""
    ident = checkpoint_id.encode("ascii")
    lengths = _LENGTHS.pack(len(ident), pack_length)
    crc = zlib.crc32(lengths + ident)
    return _FRAME.pack(FRAME_MAGIC, len(ident), pack_length, crc) + ident


def shifted(header: PackHeader, base: int) -> PackHeader:
    """``header`` (spans relative to its pack) with spans relative to the file the pack is in."""
    offset, length = header.record
    blobs = {d: (base + o, n) for d, (o, n) in header.blobs.items()}
    return PackHeader(header.inode, (base + offset, length), blobs, base + header.end)


def scan_segment(fd: int, name: str, inode: int, size: int, start: int = 0) -> SegmentScan:
    """Read the frames of an open segment from ``start`` (a frame boundary) to ``size``.

    Raises:
        OSError: the file cannot be read.
    """
    scan = SegmentScan(inode, end=start)
    offset = start
    while offset < size:
        data = os.pread(fd, min(_FIRST_READ, size - offset), offset)
        if len(data) < _FRAME.size:
            scan.torn = True
            break
        magic, id_length, pack_length, crc = _FRAME.unpack_from(data)
        if magic != FRAME_MAGIC or id_length > _MAX_ID:
            scan.damage = f"segment {name}: no frame at offset {offset} (bad magic or length)"
            break
        id_end = _FRAME.size + id_length
        if len(data) < id_end:  # the file ends inside the id
            scan.torn = True
            break
        ident = data[_FRAME.size : id_end]
        if zlib.crc32(_LENGTHS.pack(id_length, pack_length) + ident) != crc:
            scan.damage = f"segment {name}: the frame at offset {offset} is damaged (checksum)"
            break
        base = offset + id_end
        if pack_length > size - base:  # runs past the end: a save still writing, or a crash
            scan.torn = True
            break
        try:
            checkpoint_id = ident.decode("ascii")
        except UnicodeDecodeError:
            scan.damage = f"segment {name}: the frame at offset {offset} has a malformed id"
            break
        header, damage = _frame_header(
            fd, name, data[id_end:], inode=inode, base=base, length=pack_length
        )
        scan.frames.append(Frame(checkpoint_id, offset, header, damage, base + pack_length))
        offset = base + pack_length
        scan.end = offset
    return scan


def _frame_header(
    fd: int, name: str, data: bytes, *, inode: int, base: int, length: int
) -> tuple[PackHeader | None, str]:
    where = f"{name}@{base}"
    try:
        data = data[:length]
        while True:
            parsed = parse_header(where, data, inode, length)
            if isinstance(parsed, PackHeader):
                return shifted(parsed, base), ""
            more = os.pread(fd, parsed - len(data), base + len(data))
            if not more:
                raise CheckpointCorrupt(f"pack {where} is truncated inside its header")
            data += more
    except CheckpointCorrupt as exc:
        return None, str(exc)


class SegmentWriter:
    """The segment one store handle appends its saves to (thread-safe).

    A handle starts a new segment when it first saves, after a failed append, and
    after a collection (``generation``: the store's collection token), which may
    have rewritten or removed the old one. After :meth:`close` it appends nothing
    more: a save that the close overtook raises ``StoreClosed`` rather than start a
    segment (and an open file) that nothing would close.
    """

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._lock = threading.Lock()
        self._closed = False
        self._fd: int | None = None
        self._name = ""
        self._inode = 0
        self._offset = 0
        self._generation: bytes | None = None
        self._pid = os.getpid()

    def append(
        self,
        generation: bytes | None,
        checkpoint_id: str,
        record: bytes,
        blobs: Sequence[tuple[str, bytes]],
        hints: bytes,
    ) -> tuple[str, Frame]:
        """Append one record's frame, durably; returns the segment's name and the frame.

        The caller holds the store lock (shared), so no collection runs meanwhile.
        On any failure the frame is cut off again (the file truncated to where it
        began) and the segment abandoned, so a save that raised leaves no record.

        Raises:
            OSError: the segment could not be created, written or synced.
            StoreClosed: the writer was closed (the store's ``close()``); nothing was written.
        """
        head = encode_header(len(record), [(d, len(b)) for d, b in blobs])
        pack_length = len(head) + len(record) + sum(len(b) for _, b in blobs) + len(hints)
        prefix = encode_frame_prefix(checkpoint_id, pack_length)
        with self._lock:
            if self._closed:
                raise store_closed(f"FileStore({str(self._folder.parent)!r})")
            # A collection (a new generation) may have rewritten the segment; a file
            # with no name left was replaced or removed: never append to either. A
            # forked child must not append where its parent does: a segment of its own.
            if (
                self._fd is None
                or generation != self._generation
                or self._pid != os.getpid()
                or os.fstat(self._fd).st_nlink == 0
            ):
                self._start(generation)
            fd = self._fd
            assert fd is not None
            start = self._offset
            try:
                write_all(fd, [prefix, head, record, *(b for _, b in blobs), hints], start)
                getattr(os, "fdatasync", os.fsync)(fd)  # macOS has no fdatasync
            except BaseException:
                self._abandon(truncate_to=start)
                raise
            base = start + len(prefix)
            self._offset = base + pack_length
            parsed = parse_header(self._name, head, self._inode, pack_length)
            assert isinstance(parsed, PackHeader)  # the header just encoded, whole
            header = shifted(parsed, base)
            return self._name, Frame(checkpoint_id, start, header, "", self._offset)

    def close(self) -> None:
        """Stop appending, for good (the segment stays, with every frame it holds).

        Waits for an append in progress (its write and ``fdatasync``) to end.
        """
        with self._lock:
            self._closed = True
            self._abandon()

    def _start(self, generation: bytes | None) -> None:
        self._pid = os.getpid()  # after a fork: the child closes its copy of the parent's fd
        self._abandon()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        name = f"{os.urandom(16).hex()}{SEGMENT_SUFFIX}"
        fd = os.open(self._folder / name, flags, 0o600)
        try:
            fsync_dir(self._folder)  # the name is durable before any save relies on it
            self._inode = os.fstat(fd).st_ino
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._name, self._offset, self._generation = fd, name, 0, generation

    def _abandon(self, truncate_to: int | None = None) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if truncate_to is not None:
                os.ftruncate(fd, truncate_to)
        except OSError as exc:
            raise CheckpointError(
                f"a failed save could not be cut off segment {self._name} in {self._folder}: "
                f"{exc}; run store.verify() before relying on the store"
            ) from exc
        finally:
            os.close(fd)


def mutate_segment(
    path: Path,
    *,
    record: tuple[str, Callable[[bytes], bytes]] | None = None,
    blob: tuple[str, Callable[[bytes], bytes]] | None = None,
) -> bool:
    """Rewrite a segment with one record's bytes, or one blob's in every frame, mutated.

    For damage tests, as ``_pack.mutate_pack``: each changed pack's header and frame
    prefix are rewritten to match, so the damage is in the record or blob itself,
    and the new file replaces the old one (a new inode: open stores notice).
    Returns whether the segment held what was to be changed.
    """
    data = path.read_bytes()
    with open(path, "rb") as f:
        scan = scan_segment(f.fileno(), path.name, 0, len(data))
    out: list[bytes] = []
    changed = False
    for frame in scan.frames:
        base = frame.start + _FRAME.size + len(frame.checkpoint_id)
        pack = data[base : frame.end]
        new = None
        if record is not None and record[0] == frame.checkpoint_id:
            new = mutate_pack_bytes(pack, record=record[1])
        elif blob is not None:
            new = mutate_pack_bytes(pack, blob=blob)
        if new is not None:
            changed, pack = True, new
        out += [encode_frame_prefix(frame.checkpoint_id, len(pack)), pack]
    if changed:
        tmp = path.with_name(f"{TMP}damage-{path.name}")
        tmp.write_bytes(b"".join(out) + data[scan.end :])
        os.replace(tmp, path)
    return changed
