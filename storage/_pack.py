"""FileStore packs: one file holding a checkpoint's record and the new blobs it brought.

A pack is written once (temp file, fsync, link into place, folder fsync) and never
changed; collection only renames or unlinks whole packs. Layout::

    b"AFPACK01"                     magic and pack version (8 bytes)
    header length, header crc32     two big-endian uint32
    header                          msgpack [record_length, [[digest (32 raw bytes), length], ...]]
    record                          record_length bytes (0: a blob-only pack)
    blobs                           each blob's bytes, in header order

The header has its own checksum because it locates everything else; the record and
the blobs carry theirs (the record's frame digest, the blob's sha256 address), so a
pack needs no checksum over its whole body and a read touches only what it needs.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import msgpack

from actorflow.errors import CheckpointCorrupt

MAGIC = b"AFPACK01"
_PREFIX = struct.Struct(">8sII")
TMP = ".tmp-"
RECORD_SUFFIX = ".pack"
BLOBS_SUFFIX = ".blobs"
# One read usually covers the prefix, the header and the record of a W3-sized pack.
_FIRST_READ = 16384


@dataclass(frozen=True, slots=True)
class PackHeader:
    """Where a pack's record and blobs are: byte spans in the file."""

    inode: int
    record: tuple[int, int]
    """Offset and length of the record; length 0 in a blob-only pack."""
    blobs: dict[str, tuple[int, int]]
    """Hex digest -> offset and length."""


def encode_header(record_length: int, blobs: Iterable[tuple[str, int]]) -> bytes:
    """The prefix and header of a pack holding a record of this length and these blobs."""
    entries = [[bytes.fromhex(digest), length] for digest, length in blobs]
    header: bytes = msgpack.packb([record_length, entries], use_bin_type=True)
    return _PREFIX.pack(MAGIC, len(header), zlib.crc32(header)) + header


def parse_header(name: str, data: bytes, inode: int) -> PackHeader | int:
    """Parse a pack's first bytes; returns how many bytes are needed if ``data`` is short.

    Raises:
        CheckpointCorrupt: not a pack, or its header is damaged.
    """
    if len(data) < _PREFIX.size:
        return _PREFIX.size
    magic, size, crc = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise CheckpointCorrupt(f"pack {name} is not an actorflow pack (bad magic)")
    end: int = _PREFIX.size + size
    if len(data) < end:
        return end
    header = data[_PREFIX.size : end]
    if zlib.crc32(header) != crc:
        raise CheckpointCorrupt(f"pack {name} has a damaged header (checksum mismatch)")
    try:
        record_length, entries = msgpack.unpackb(header, raw=False, use_list=True)
        if type(record_length) is not int or record_length < 0:
            raise ValueError("malformed record length")
        blobs: dict[str, tuple[int, int]] = {}
        offset = end + record_length
        for digest, length in entries:
            if type(digest) is not bytes or len(digest) != 32 or type(length) is not int:
                raise ValueError("malformed blob entry")
            blobs.setdefault(digest.hex(), (offset, length))
            offset += length
    except Exception as exc:  # a crc collision on garbage: still never a crash
        raise CheckpointCorrupt(f"pack {name} has a malformed header: {exc}") from exc
    return PackHeader(inode, (end, record_length), blobs)


def read_header(
    path: Path | str, inode: int | None = None, first: int = _FIRST_READ
) -> tuple[PackHeader, bytes]:
    """A pack's header and the first bytes read (which often hold the record too).

    ``inode``, when the caller listed it under the store lock, saves an ``fstat``;
    ``first`` is how much to read at once (more is read if the header is longer).

    Raises:
        FileNotFoundError: no such pack (collected or renamed meanwhile).
        CheckpointCorrupt: the header is damaged.
    """
    name = os.path.basename(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        if inode is None:
            inode = os.fstat(fd).st_ino
        data = os.pread(fd, first, 0)
        while True:
            parsed = parse_header(name, data, inode)
            if isinstance(parsed, PackHeader):
                return parsed, data
            more = os.pread(fd, parsed - len(data), len(data))
            if not more:
                raise CheckpointCorrupt(f"pack {name} is truncated inside its header")
            data += more
    finally:
        os.close(fd)


def read_record(path: Path) -> bytes:
    """The record bytes of a record pack (read without its blobs).

    Raises:
        FileNotFoundError: no such pack.
        CheckpointCorrupt: the header is damaged, the pack holds no record, or is truncated.
    """
    header, data = read_header(path)
    offset, length = header.record
    if length == 0:
        raise CheckpointCorrupt(f"pack {path.name} holds no record")
    if len(data) >= offset + length:
        return data[offset : offset + length]
    with open(path, "rb") as f:
        f.seek(offset)
        record = f.read(length)
    if len(record) != length:
        raise CheckpointCorrupt(f"pack {path.name} is truncated inside its record")
    return record


def read_spans(path: Path, inode: int, spans: list[tuple[int, int]]) -> list[bytes] | None:
    """The bytes at these spans of one pack; None if the file at ``path`` is another inode.

    Short reads are returned short: the caller verifies every blob against its digest.

    Raises:
        FileNotFoundError: no such pack.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_ino != inode:
            return None  # replaced since it was indexed (a collection ran)
        return [os.pread(fd, length, offset) for offset, length in spans]
    finally:
        os.close(fd)


BlobSource = bytes | Callable[[], bytes]
"""A blob's bytes, or a callable producing them when the writer reaches it (packs stream)."""


def write_pack(
    folder: Path, final: Path, record: bytes, blobs: list[tuple[str, int, BlobSource]]
) -> PackHeader | None:
    """Durably create the pack ``final``; returns its header, or None if ``final`` existed.

    Temp file (a unique name, created with ``O_EXCL``), write, fsync, ``link(2)`` into
    place (fails atomically on an existing name, so two writers of one id cannot
    overwrite each other), folder fsync: one file fsync and one folder fsync per pack.
    """
    head = encode_header(len(record), [(d, n) for d, n, _ in blobs])
    fd, tmp = _create_temp(os.fspath(folder))
    try:
        try:
            if all(isinstance(source, bytes) for _, _, source in blobs):
                parts = [head, record, *(source for _, _, source in blobs)]
                _write_all(fd, [p for p in parts if isinstance(p, bytes)])
            else:
                _write_all(fd, [head, record])
                for digest, length, source in blobs:
                    data = source if isinstance(source, bytes) else source()
                    if len(data) != length:
                        raise CheckpointCorrupt(f"blob {digest} changed length while being packed")
                    _write_all(fd, [data])
            os.fsync(fd)
            inode = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(folder)
    header = parse_header(final.name, head, inode)
    assert isinstance(header, PackHeader)  # it is the header just encoded, whole
    return header


def _create_temp(folder: str) -> tuple[int, str]:
    """A new, private temp file in ``folder`` (what ``mkstemp`` does, minus its overhead)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    while True:
        path = os.path.join(folder, f"{TMP}{os.urandom(8).hex()}")
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Write every byte of ``parts``; ``writev`` may stop short on large buffers."""
    views = [memoryview(p) for p in parts if p]
    while views:
        written = os.writev(fd, views[:1024])  # IOV_MAX
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def fsync_dir(folder: Path) -> None:
    """Make the folder's entries (creations, renames, unlinks) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mutate_pack(
    path: Path,
    *,
    record: Callable[[bytes], bytes] | None = None,
    blob: tuple[str, Callable[[bytes], bytes]] | None = None,
) -> bool:
    """Rewrite a pack with its record or one blob replaced by ``mutate(bytes)``; for damage tests.

    The header is rewritten to match, so the damage is in the record or blob itself.
    The new file replaces the old one (a new inode: open stores notice). Returns
    whether the pack held what was to be changed.
    """
    data = path.read_bytes()
    header = parse_header(path.name, data, 0)
    assert isinstance(header, PackHeader)
    offset, length = header.record
    new_record = data[offset : offset + length]
    if record is not None:
        if length == 0:
            return False
        new_record = record(new_record)
    entries = [(d, data[o : o + n]) for d, (o, n) in header.blobs.items()]
    if blob is not None:
        if blob[0] not in header.blobs:
            return False
        entries = [(d, blob[1](b) if d == blob[0] else b) for d, b in entries]
    tmp = path.with_name(f"{TMP}damage-{path.name}")
    head = encode_header(len(new_record), [(d, len(b)) for d, b in entries])
    tmp.write_bytes(head + new_record + b"".join(b for _, b in entries))
    os.replace(tmp, path)
    return True
