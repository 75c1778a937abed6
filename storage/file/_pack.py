"""FileStore packs: one file holding a checkpoint's record and the new blobs it brought.

A pack is written once (temp file, fsync, link into place, folder fsync) and never
changed; collection only renames or unlinks whole packs. Layout::

    b"AFPACK01"                     magic and pack version (8 bytes)
    header length, header crc32     two big-endian uint32
    header                          msgpack [record_length, [[digest (32 raw bytes), length], ...]]
    record                          record_length bytes (0: a blob-only pack)
    blobs                           each blob's bytes, in header order
    hints (optional)                b"AFHINT01", body length, body crc32, body:
                                    msgpack [name of another pack holding a blob the record uses, ...]

The header has its own checksum because it locates everything else; the record and
the blobs carry theirs (the record's frame digest, the blob's sha256 address), so a
pack needs no checksum over its whole body and a read touches only what it needs.

The hints let a store handle that has not read the folder find a record's blobs by
reading a few pack headers instead of all of them. They are only hints: a reader
trusts nothing in them but names to look at, and a damaged, stale or missing hint
trailer costs a scan of every header, never a wrong answer. They sit after the
blobs, where readers that do not know them never look (a pack's spans end at its
last blob), so packs with and without hints mix freely in one folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import msgpack

from actorflow.errors import CheckpointCorrupt, CheckpointError

MAGIC = b"AFPACK01"
HINT_MAGIC = b"AFHINT01"
_PREFIX = struct.Struct(">8sII")  # magic, length, crc32: for the header and for the hints
# Hints name packs, so they stay small; a bound keeps a damaged length from making
# a reader allocate gigabytes. A record whose hints would not fit simply has none.
MAX_HINTS_BYTES = 1 << 20
_PACK_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")
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
    end: int = 0
    """Offset just past the last blob: where the hints start, if the pack has any."""


def encode_header(record_length: int, blobs: Iterable[tuple[str, int]]) -> bytes:
    """The prefix and header of a pack holding a record of this length and these blobs."""
    entries = [[bytes.fromhex(digest), length] for digest, length in blobs]
    header: bytes = msgpack.packb([record_length, entries], use_bin_type=True)
    return _PREFIX.pack(MAGIC, len(header), zlib.crc32(header)) + header


def parse_header(name: str, data: bytes, inode: int, size: int) -> PackHeader | int:
    """Parse a pack's first bytes; returns how many bytes are needed if ``data`` is short.

    ``size`` is the pack file's size: every span the header gives must lie inside
    it, so a damaged (or forged, checksum and all) length is reported here and
    never reaches a read or an allocation.

    Raises:
        CheckpointCorrupt: not a pack, or its header is damaged.
    """
    if len(data) < _PREFIX.size:
        return _PREFIX.size
    file_size = size
    magic, header_size, crc = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise CheckpointCorrupt(f"pack {name} is not an actorflow pack (bad magic)")
    end: int = _PREFIX.size + header_size
    if end > file_size:
        raise CheckpointCorrupt(f"pack {name} is truncated inside its header")
    if len(data) < end:
        return end
    header = data[_PREFIX.size : end]
    if zlib.crc32(header) != crc:
        raise CheckpointCorrupt(f"pack {name} has a damaged header (checksum mismatch)")
    try:
        record_length, entries = msgpack.unpackb(header, raw=False, use_list=True)
        if type(record_length) is not int or not 0 <= record_length <= file_size - end:
            raise ValueError(f"record length {record_length!r} does not fit in the file")
        blobs: dict[str, tuple[int, int]] = {}
        offset = end + record_length
        for digest, length in entries:
            if type(digest) is not bytes or len(digest) != 32 or type(length) is not int:
                raise ValueError("malformed blob entry")
            if not 0 <= length <= file_size - offset:
                raise ValueError(f"blob length {length} does not fit in the file")
            blobs.setdefault(digest.hex(), (offset, length))
            offset += length
    except Exception as exc:  # damage under a recomputed crc, or a crc collision
        raise CheckpointCorrupt(f"pack {name} has a malformed header: {exc}") from exc
    return PackHeader(inode, (end, record_length), blobs, offset)


def open_pack(path: Path | str) -> tuple[int, os.stat_result]:
    """Open a pack for reading; returns the fd (the caller closes it) and its stat.

    ``O_NONBLOCK`` so that a FIFO under a pack's name cannot block the open.

    Raises:
        FileNotFoundError: no such pack.
        CheckpointCorrupt: the name is not a regular file (a folder, a FIFO, a device).
        CheckpointError: the file cannot be opened (permissions, I/O).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise CheckpointError(f"cannot open pack {os.path.basename(path)}: {exc}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointCorrupt(
                f"pack {os.path.basename(path)} is not a regular file; remove or rename it"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_header(path: Path | str, first: int = _FIRST_READ) -> tuple[PackHeader, bytes]:
    """A pack's header and the first bytes read (which often hold the record too).

    ``first`` is how much to read at once (more is read if the header is longer).

    Raises:
        FileNotFoundError: no such pack (collected or renamed meanwhile).
        CheckpointCorrupt: the header is damaged, or the name is not a regular file.
        CheckpointError: the pack cannot be read.
    """
    fd, st = open_pack(path)
    try:
        return _read_header(fd, os.path.basename(path), st, first)
    except OSError as exc:
        raise CheckpointError(f"cannot read pack {os.path.basename(path)}: {exc}") from exc
    finally:
        os.close(fd)


def _read_header(fd: int, name: str, st: os.stat_result, first: int) -> tuple[PackHeader, bytes]:
    data = os.pread(fd, min(first, st.st_size), 0)
    while True:
        parsed = parse_header(name, data, st.st_ino, st.st_size)
        if isinstance(parsed, PackHeader):
            return parsed, data
        more = os.pread(fd, parsed - len(data), len(data))
        if not more:
            raise CheckpointCorrupt(f"pack {name} is truncated inside its header")
        data += more


def read_pack_hints(path: str) -> tuple[PackHeader, list[str]]:
    """A record pack's header and the names its hints give (``[]`` if it has none).

    Hints are advisory (see the module docstring): a trailer that is missing,
    truncated, damaged or malformed gives ``[]``, and only well-formed pack names
    (no separators, no leading dot) are returned.

    Raises:
        FileNotFoundError: no such pack.
        CheckpointCorrupt: the pack's header is damaged.
    """
    fd, st = open_pack(path)
    try:
        header, data = _read_header(fd, os.path.basename(path), st, _FIRST_READ)
        start = header.end
        if len(data) < start + _PREFIX.size:
            data = os.pread(fd, 4096, start)  # one more read, usually the whole trailer
            start = 0
        if len(data) < start + _PREFIX.size:
            return header, []
        magic, size, crc = _PREFIX.unpack_from(data, start)
        if magic != HINT_MAGIC or size > MAX_HINTS_BYTES:
            return header, []
        body = data[start + _PREFIX.size : start + _PREFIX.size + size]
        if len(body) < size:
            body = os.pread(fd, size, header.end + _PREFIX.size)
    finally:
        os.close(fd)
    return header, _parse_hints(body, size, crc)


def hints_prefix(data: bytes) -> tuple[int, int] | None:
    """The body length and crc32 a hints trailer starting ``data`` gives; None if it is none."""
    if len(data) < _PREFIX.size:
        return None
    magic, size, crc = _PREFIX.unpack_from(data)
    return (size, crc) if magic == HINT_MAGIC else None


def _parse_hints(body: bytes, size: int, crc: int) -> list[str]:
    if len(body) != size or zlib.crc32(body) != crc:
        return []
    try:
        names = msgpack.unpackb(body, raw=False, use_list=True)
    except Exception:  # noqa: BLE001 - a hint that cannot be read is no hint
        return []
    if type(names) is not list:
        return []
    return [n for n in names if type(n) is str and _PACK_NAME.fullmatch(n)]


def encode_hints(names: Iterable[str]) -> bytes:
    """The hint trailer naming these packs; empty if there are none or too many."""
    body: bytes = msgpack.packb(sorted(names), use_bin_type=True)
    if body == b"\x90" or len(body) > MAX_HINTS_BYTES:
        return b""
    return _PREFIX.pack(HINT_MAGIC, len(body), zlib.crc32(body)) + body


def read_record(path: Path) -> bytes:
    """The record bytes of a record pack (read without its blobs).

    Raises:
        FileNotFoundError: no such pack.
        CheckpointCorrupt: the header is damaged, the pack holds no record, or is truncated.
    """
    fd, st = open_pack(path)
    try:
        header, data = _read_header(fd, path.name, st, _FIRST_READ)
        offset, length = header.record
        if length == 0:
            raise CheckpointCorrupt(f"pack {path.name} holds no record")
        if len(data) >= offset + length:
            return data[offset : offset + length]
        record = os.pread(fd, length, offset)  # length fits in the file: parse_header checked
    except OSError as exc:
        raise CheckpointError(f"cannot read pack {path.name}: {exc}") from exc
    finally:
        os.close(fd)
    if len(record) != length:
        raise CheckpointCorrupt(f"pack {path.name} is truncated inside its record")
    return record


def read_spans(path: Path, inode: int, spans: list[tuple[int, int]]) -> list[bytes] | None:
    """The bytes at these spans of one pack; None if the file at ``path`` is another inode.

    Short reads are returned short: the caller verifies every blob against its digest.

    Raises:
        FileNotFoundError: no such pack.
    """
    fd, st = open_pack(path)
    try:
        if st.st_ino != inode:
            return None  # replaced since it was indexed (a collection ran)
        return [os.pread(fd, length, offset) for offset, length in spans]
    except OSError as exc:
        raise CheckpointError(f"cannot read pack {path.name}: {exc}") from exc
    finally:
        os.close(fd)


BlobSource = bytes | Callable[[], bytes]
"""A blob's bytes, or a callable producing them when the writer reaches it (packs stream)."""


def write_pack(
    folder: Path,
    final: Path,
    record: bytes,
    blobs: list[tuple[str, int, BlobSource]],
    hints: bytes = b"",
) -> PackHeader | None:
    """Durably create the pack ``final``; returns its header, or None if ``final`` existed.

    Temp file (a unique name, created with ``O_EXCL``), write, fsync, ``link(2)`` into
    place (fails atomically on an existing name, so two writers of one id cannot
    overwrite each other), folder fsync: one file fsync and one folder fsync per pack.
    ``hints`` (from :func:`encode_hints`) go after the blobs.
    """
    head = encode_header(len(record), [(d, n) for d, n, _ in blobs])
    total = sum(n for _, n, _ in blobs)
    fd, tmp = _create_temp(os.fspath(folder))
    try:
        try:
            if all(isinstance(source, bytes) for _, _, source in blobs):
                parts = [head, record, *(source for _, _, source in blobs), hints]
                write_all(fd, [p for p in parts if isinstance(p, bytes)])
            else:
                write_all(fd, [head, record])
                for digest, length, source in blobs:
                    data = source if isinstance(source, bytes) else source()
                    if len(data) != length:
                        raise CheckpointCorrupt(f"blob {digest} changed length while being packed")
                    write_all(fd, [data])
                write_all(fd, [hints])
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
    header = parse_header(final.name, head, inode, len(head) + len(record) + total + len(hints))
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


def write_all(fd: int, parts: list[bytes], offset: int | None = None) -> None:
    """Write every byte of ``parts`` (at ``offset``, or at the file position when
    None); ``writev``/``pwritev`` may stop short on large buffers."""
    views = [memoryview(p) for p in parts if p]
    while views:
        if offset is None:
            written = os.writev(fd, views[:1024])  # IOV_MAX
        else:
            written = os.pwritev(fd, views[:1024], offset)
            offset += written
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
    data = mutate_pack_bytes(path.read_bytes(), record=record, blob=blob)
    if data is None:
        return False
    tmp = path.with_name(f"{TMP}damage-{path.name}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def mutate_pack_bytes(
    data: bytes,
    *,
    record: Callable[[bytes], bytes] | None = None,
    blob: tuple[str, Callable[[bytes], bytes]] | None = None,
) -> bytes | None:
    """A pack's bytes with its record or one blob mutated (see :func:`mutate_pack`); None if
    the pack does not hold what was to be changed."""
    header = parse_header("pack", data, 0, len(data))
    assert isinstance(header, PackHeader)
    offset, length = header.record
    new_record = data[offset : offset + length]
    if record is not None:
        if length == 0:
            return None
        new_record = record(new_record)
    entries = [(d, data[o : o + n]) for d, (o, n) in header.blobs.items()]
    if blob is not None:
        if blob[0] not in header.blobs:
            return None
        entries = [(d, blob[1](b) if d == blob[0] else b) for d, b in entries]
    head = encode_header(len(new_record), [(d, len(b)) for d, b in entries])
    hints = data[header.end :]  # kept: they name other packs, which did not change
    return head + new_record + b"".join(b for _, b in entries) + hints
