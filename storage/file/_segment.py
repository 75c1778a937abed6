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

Where the next frame starts is what the prefix's pack length says, and its crc32
only proves the prefix was written as it reads: a forged length (crc32 recomputed)
or a writer's bug would move the next frame, and every frame it skipped would be
a record silently gone. So the length is checked against the pack itself, which
ends where its header's spans end plus its hints trailer (none, or one whose magic
and length check out): a frame whose length says otherwise stops the reading, as
damage. A frame that runs past the end of the file is a torn tail only if its pack,
as far as it was written, agrees with its length, and no whole frame prefix follows
anywhere after its start: a torn tail is the last thing ever written to its file.
A frame whose pack header is damaged cannot be checked that way, so its bytes are
searched for a frame prefix it would hide. A frame's id must be a file-name-safe
checkpoint id seen once in its segment (one handle appends, and a save of a stored
id is refused). A frame whose record names another id (:attr:`Frame.other_id`) is
read on, but it is damage that may hide that record: listing refuses while it lives.

Deleting a record appends its id to the store's ``deleted`` list (the records of
a segment cannot be renamed away one by one); the collection then rewrites the
segments holding deleted records (see ``_gc``).
"""

from __future__ import annotations

import os
import re
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

from actorflow.errors import CheckpointCorrupt, CheckpointError
from actorflow.storage._common import store_closed
from actorflow.storage._format import RECORD_ID_SPAN, record_id

from ._pack import (
    MAX_HINTS_BYTES,
    TMP,
    PackHeader,
    encode_header,
    fsync_dir,
    hints_prefix,
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
_SAFE_ID = re.compile(rb"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")
_HINTS_PREFIX = 16  # a hints trailer's magic, body length and crc32 (see _pack)
# How much of a file one read covers while looking for a frame prefix a damaged frame hides.
_SEARCH_READ = 1 << 20
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
    other_id: str = ""
    """The id its record names, if not ``checkpoint_id`` (the frame's id is damaged)."""


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
    """Non-empty: the frame at ``end`` is damaged (its prefix, or its length disagrees
    with its pack); nothing after it can be read."""


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


def scan_segment(
    fd: int,
    name: str,
    inode: int,
    size: int,
    start: int = 0,
    *,
    seen: AbstractSet[str] = frozenset(),
    record_names: bool = True,
) -> SegmentScan:
    """Read the frames of an open segment from ``start`` (a frame boundary) to ``size``.

    ``seen``: the ids of the frames before ``start`` (a second frame of one is damage).
    ``record_names``: read the id each frame's record names (``Frame.other``), which
    costs a read of the record's head per frame; a reader of blobs alone leaves it
    out (it halved what a resume's second scan of each segment costs, ~0.4 ms of W4
    on a FileStore).

    Raises:
        OSError: the file cannot be read.
    """
    scan = SegmentScan(inode, end=start)
    ids = set(seen)
    offset = start
    ahead = b""  # the first bytes at ``offset``, when the last frame's check read them
    while offset < size:
        data = ahead or os.pread(fd, min(_FIRST_READ, size - offset), offset)
        ahead = b""
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
        if not _SAFE_ID.fullmatch(ident):
            scan.damage = f"segment {name}: the frame at offset {offset} has a malformed id"
            break
        checkpoint_id = ident.decode("ascii")
        if checkpoint_id in ids:
            scan.damage = (
                f"segment {name}: the frame at offset {offset} repeats the id {checkpoint_id}"
            )
            break
        base = offset + id_end
        where = f"segment {name}: the frame of {checkpoint_id} at offset {offset}"
        if pack_length > size - base:  # runs past the end: a save still writing, or a crash
            scan.damage = _torn_damage(
                fd, where, data[id_end:], offset=offset, base=base, length=pack_length, size=size
            )
            scan.torn = not scan.damage
            break
        header, damage = _frame_header(
            fd, name, data[id_end:], inode=inode, base=base, length=pack_length
        )
        if header is not None:
            scan.damage, ahead = _length_damage(
                fd, where, data[id_end:], base=base, length=pack_length, header=header, size=size
            )
        else:  # the length cannot be checked against the pack: look for what it would hide
            hidden = _next_prefix(fd, offset + 1, base + pack_length)
            if hidden is not None:
                scan.damage = f"{where} is damaged and covers a frame at offset {hidden}"
        if scan.damage:
            break
        named = _record_name(fd, data[id_end:], base, header) if header and record_names else None
        other = named if named is not None and named != checkpoint_id else ""
        ids.add(checkpoint_id)
        frame = Frame(checkpoint_id, offset, header, damage, base + pack_length, other)
        scan.frames.append(frame)
        offset = base + pack_length
        scan.end = offset
    return scan


def _record_name(fd: int, data: bytes, base: int, header: PackHeader) -> str | None:
    """The id the frame's record names (None if its first bytes do not say)."""
    offset, length = header.record
    want = min(length, RECORD_ID_SPAN)
    start = offset - base
    head = data[start : start + want]
    if len(head) < want:
        head = os.pread(fd, want, offset)
    return record_id(head) if length else None


def _length_damage(
    fd: int, where: str, data: bytes, *, base: int, length: int, header: PackHeader, size: int
) -> tuple[str, bytes]:
    """Why a whole frame's pack length is not where its pack ends ("" if it is).

    ``data``: the first bytes of the pack, as read with the frame's prefix. Also
    returns the first bytes of the next frame when the hints trailer had to be read
    (one read for both: the scan then reads once per frame, as it did before this
    check, ~0.3 ms less per scan of W3's segment), else ``b""``.
    """
    blobs_end = header.end - base
    trailer = length - blobs_end
    if trailer == 0:
        return "", b""
    ahead = b""
    if _HINTS_PREFIX <= trailer <= _HINTS_PREFIX + MAX_HINTS_BYTES:
        if len(data) >= length:
            tail = data[blobs_end:length]
        else:
            after = base + length
            read = os.pread(fd, trailer + min(_FIRST_READ, size - after), header.end)
            tail, ahead = read[:trailer], read[trailer:]
        found = hints_prefix(tail)
        if (
            found is not None
            and _HINTS_PREFIX + found[0] == trailer
            and zlib.crc32(tail[_HINTS_PREFIX:]) == found[1]
        ):
            return "", ahead
    return (
        f"{where} claims a pack of {length} bytes, but its pack ends after {blobs_end} bytes"
        f" and the {trailer} bytes after that are not its hints: the frame's length is damaged"
    ), b""


def _torn_damage(
    fd: int, where: str, data: bytes, *, offset: int, base: int, length: int, size: int
) -> str:
    """Why a frame that runs past the end of the file is no torn tail ("" if it may be one).

    A save cut short leaves a prefix of its frame: a pack whose header, if it was
    written, agrees with the frame's length, and nothing after it.
    """
    available = size - base
    try:
        parsed = parse_header(where, data[:available], 0, length)
        if not isinstance(parsed, PackHeader) and parsed <= available:
            parsed = parse_header(where, os.pread(fd, parsed, base), 0, length)
    except CheckpointCorrupt:
        parsed = None  # what was written is no pack header: the search below decides
    if isinstance(parsed, PackHeader):
        trailer = length - parsed.end
        if trailer != 0 and not _HINTS_PREFIX <= trailer <= _HINTS_PREFIX + MAX_HINTS_BYTES:
            return (
                f"{where} claims a pack of {length} bytes, past the end of the file, but its"
                f" pack ends after {parsed.end} bytes: the frame's length is damaged"
            )
        if trailer and available >= parsed.end + _HINTS_PREFIX:
            found = hints_prefix(os.pread(fd, _HINTS_PREFIX, base + parsed.end))
            if found is None or _HINTS_PREFIX + found[0] != trailer:
                return (
                    f"{where} claims a pack of {length} bytes, past the end of the file, but"
                    " its hints end elsewhere: the frame's length is damaged"
                )
    hidden = _next_prefix(fd, offset + 1, size)
    if hidden is not None:
        return (
            f"{where} runs past the end of the file, but a frame follows at offset {hidden}:"
            " the frame's length is damaged"
        )
    return ""


def _next_prefix(fd: int, start: int, stop: int) -> int | None:
    """The offset of the first whole frame prefix (magic, id, checksum) in ``[start, stop)``."""
    overlap = _FRAME.size + _MAX_ID
    offset = start
    while offset < stop:
        chunk = os.pread(fd, min(_SEARCH_READ, stop - offset) + overlap, offset)
        at = chunk.find(FRAME_MAGIC)
        while 0 <= at < min(_SEARCH_READ, stop - offset):
            if _is_prefix(chunk[at : at + overlap]):
                return offset + at
            at = chunk.find(FRAME_MAGIC, at + 1)
        offset += _SEARCH_READ
    return None


def _is_prefix(data: bytes) -> bool:
    if len(data) < _FRAME.size:
        return False
    _, id_length, pack_length, crc = _FRAME.unpack_from(data)
    ident = data[_FRAME.size : _FRAME.size + id_length]
    return (
        id_length <= _MAX_ID
        and len(ident) == id_length
        and zlib.crc32(_LENGTHS.pack(id_length, pack_length) + ident) == crc
        and _SAFE_ID.fullmatch(ident) is not None
    )


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
