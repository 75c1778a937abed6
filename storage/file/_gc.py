"""FileStore housekeeping: the layout marker, retiring records, collecting blobs, upgrading.

Everything here that changes packs runs under the store's exclusive ``flock`` (no
save is between its blob check and its commit), after the generation token in the
lock file was replaced (see ``_packindex``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from actorflow.errors import CheckpointCorrupt, CheckpointError, UnsupportedFormat
from actorflow.storage._format import Checkpoint, decode_checkpoint, is_blob_digest

from ._pack import (
    BLOBS_SUFFIX,
    RECORD_SUFFIX,
    TMP,
    BlobSource,
    fsync_dir,
    open_pack,
    read_record,
    read_spans,
    write_pack,
)
from ._packindex import PackIndex
from ._segment import SEGMENT_SUFFIX, Frame, scan_segment

if os.name == "posix":
    import fcntl

FILESTORE_MARKER = "actorflow-store"
PACKS = "packs"
LAYOUT = b"actorflow FileStore layout 3\n"
LAYOUT_2 = b"actorflow FileStore layout 2\n"
_LAYOUT_1 = b"actorflow FileStore layout 1\n"
_LAYOUTS = {2: LAYOUT_2, 3: LAYOUT}
_LAYOUT_PREFIX = b"actorflow FileStore layout "
# "checkpoints" and "blobs" are layout 1's folders, left behind by an interrupted upgrade.
_KNOWN = {FILESTORE_MARKER, ".lock", "deleted", PACKS, "checkpoints", "blobs"}


def open_layout(root: Path, new: int = 3) -> int:
    """Create the layout in an empty folder, or check the marker of an existing store.

    Returns the folder's layout: 3, or 2 for a folder written by an older actorflow
    (or created with ``new=2``), which is used as it is.

    Raises:
        CheckpointError: a non-empty folder that is not a FileStore, or an I/O failure.
        UnsupportedFormat: another layout (layout 1: the message names the upgrade).
        CheckpointCorrupt: the marker is damaged.
    """
    marker = root / FILESTORE_MARKER
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not marker.exists():
            strangers = [p.name for p in root.iterdir() if p.name not in _KNOWN]
            if [s for s in strangers if not s.startswith(TMP)]:
                raise CheckpointError(
                    f"{root} is not empty and not an actorflow FileStore; "
                    "choose an empty or new folder"
                )
            (root / PACKS).mkdir(exist_ok=True)
            _write_small(root, marker, _LAYOUTS[new], replace=False)
        layout = marker.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot open FileStore at {root}: {exc}") from exc
    for number, known in _LAYOUTS.items():
        if layout == known:
            return number
    if layout == _LAYOUT_1:
        raise UnsupportedFormat(
            f"{root} uses FileStore layout 1 (a file per blob and per record), written by an "
            f"older actorflow; this one reads layouts 2 and 3. Convert it once, while no process "
            f"uses it, with actorflow.FileStore.upgrade({str(root)!r}) (or the command "
            f"`actorflow checkpoints upgrade {root}`), or keep using the older actorflow."
        )
    if layout.startswith(_LAYOUT_PREFIX):
        raise UnsupportedFormat(
            f"{root} uses {layout.decode(errors='replace').strip()!r}; this "
            f"actorflow reads layouts 2 and 3. Upgrade actorflow."
        )
    raise CheckpointCorrupt(f"{marker} is damaged: not an actorflow FileStore marker")


def retire_records(packs: Path, ids: list[str]) -> None:
    """Turn the packs of these records into blob-only packs, durably.

    The records disappear at once while every blob they carried stays readable, so
    a crash at any point cannot bring back a record whose blobs were collected.
    """
    for checkpoint_id in ids:
        try:
            os.rename(packs / f"{checkpoint_id}{RECORD_SUFFIX}", packs / _blob_pack_name())
        except FileNotFoundError:
            continue  # deleted by another handle meanwhile
    fsync_dir(packs)


def collect(packs: Path, index: PackIndex, deleted: AbstractSet[str] = frozenset()) -> None:
    """Rewrite packs and segments that hold unreferenced (or duplicate) blobs; drop temp files.

    Segments holding a deleted record (``deleted``: the ids of the store's deleted
    list) or a torn tail (no save runs now, so it is a dead writer's) are rewritten:
    each live record becomes a record pack, made durable before the segment is
    unlinked (a crash in between leaves the record twice, same bytes, which readers
    take once). Referenced blobs of the rewritten blob-only packs and segments go
    into one new blob-only pack, made durable before any old file is unlinked.
    Record packs are never rewritten: all their blobs are referenced by their own
    record. Nothing is collected while a record cannot be decoded, and packs that
    cannot be read are kept (``verify`` reports them).
    """
    index.scan()
    headers = index.packs()
    if any(name.endswith((RECORD_SUFFIX, SEGMENT_SUFFIX)) for name in index.damaged):
        return
    referenced: set[str] = set()
    provided: set[str] = set()
    for name, header in headers.items():
        if name.endswith(RECORD_SUFFIX):
            try:
                record = decode_checkpoint(read_record(packs / name))
            except (CheckpointCorrupt, UnsupportedFormat):
                return  # cannot tell what it references: collect nothing
            referenced |= record.blob_digests()
            provided |= set(header.blobs)
    segments = _read_segments(packs, sorted(n for n in headers if n.endswith(SEGMENT_SUFFIX)))
    if segments is None:
        return
    kept_ids = {n[: -len(RECORD_SUFFIX)] for n in headers if n.endswith(RECORD_SUFFIX)}
    rewrite: list[_SegmentFile] = []
    for segment in segments:
        live = [f for f in segment.frames if f.checkpoint_id not in deleted]
        for frame in live:
            decoded = segment.records[frame.checkpoint_id]
            if decoded is None:
                return  # a damaged record: cannot tell what it references
            referenced |= decoded.blob_digests()
        if len(live) < len(segment.frames) or segment.torn:
            rewrite.append(segment)
        else:
            provided |= {d for f in segment.frames if f.header for d in f.header.blobs}
    # No save holds the shared lock now, so every temp file is a crashed writer's.
    for name in os.listdir(packs):
        if name.startswith(TMP):
            (packs / name).unlink(missing_ok=True)
    for segment in rewrite:
        for frame in segment.frames:
            if frame.checkpoint_id in deleted or frame.header is None:
                continue
            if frame.checkpoint_id not in kept_ids:
                _frame_to_pack(packs, segment, frame)
                kept_ids.add(frame.checkpoint_id)
            provided |= set(frame.header.blobs)
    carry: list[tuple[str, int, BlobSource]] = []
    retired: list[str] = []
    for segment in rewrite:
        retired.append(segment.name)
        for frame in segment.frames:
            for digest, span in (frame.header.blobs if frame.header else {}).items():
                if digest in referenced and digest not in provided:
                    provided.add(digest)
                    carry.append((digest, span[1], _reader(segment.path, segment.inode, span)))
    for name, header in sorted(headers.items()):
        if not name.endswith(BLOBS_SUFFIX):
            continue
        path = packs / name
        ends = [offset + length for offset, length in header.blobs.values()]
        if ends and os.stat(path).st_size < max(ends):
            continue  # truncated: keep it as evidence; verify reports its blobs
        if header.blobs and all(d in referenced and d not in provided for d in header.blobs):
            provided |= set(header.blobs)
            continue
        retired.append(name)
        for digest, span in header.blobs.items():
            if digest in referenced and digest not in provided:
                provided.add(digest)
                carry.append((digest, span[1], _reader(path, header.inode, span)))
    if carry and write_pack(packs, packs / _blob_pack_name(), b"", carry) is None:
        raise CheckpointError(f"a new blob pack in {packs} collided with an existing name")
    for name in retired:
        (packs / name).unlink(missing_ok=True)
    if retired:
        fsync_dir(packs)
    index.scan()


@dataclass(frozen=True, slots=True)
class _SegmentFile:
    name: str
    path: Path
    inode: int
    frames: list[Frame]
    records: dict[str, Checkpoint | None]
    """Each frame's record, decoded; None if it cannot be."""
    torn: bool


def _read_segments(packs: Path, names: list[str]) -> list[_SegmentFile] | None:
    """Every frame and record of these segments; None if one is damaged (collect nothing)."""
    found: list[_SegmentFile] = []
    for name in names:
        path = packs / name
        try:
            fd, st = open_pack(path)
        except FileNotFoundError:
            continue
        try:
            scan = scan_segment(fd, name, st.st_ino, st.st_size)
            if scan.damage:
                return None
            records: dict[str, Checkpoint | None] = {}
            for frame in scan.frames:
                records[frame.checkpoint_id] = _frame_record(fd, frame)
        finally:
            os.close(fd)
        found.append(_SegmentFile(name, path, st.st_ino, scan.frames, records, scan.torn))
    return found


def _frame_record(fd: int, frame: Frame) -> Checkpoint | None:
    if frame.header is None:
        return None
    offset, length = frame.header.record
    try:
        record = decode_checkpoint(os.pread(fd, length, offset))
    except (CheckpointCorrupt, UnsupportedFormat):
        return None
    return record if record.id == frame.checkpoint_id else None


def _frame_to_pack(packs: Path, segment: _SegmentFile, frame: Frame) -> None:
    """Write a segment's frame out as the record pack ``<id>.pack``, durably."""
    assert frame.header is not None
    length = frame.header.record[1]
    spans = [frame.header.record, (frame.header.end, frame.end - frame.header.end)]
    data = read_spans(segment.path, segment.inode, spans)
    if data is None or len(data[0]) != length:
        raise CheckpointError(f"segment {segment.name} changed during a collection")
    record, hints = data
    blobs: list[tuple[str, int, BlobSource]] = [
        (digest, span[1], _reader(segment.path, segment.inode, span))
        for digest, span in frame.header.blobs.items()
    ]
    write_pack(packs, packs / f"{frame.checkpoint_id}{RECORD_SUFFIX}", record, blobs, hints)


def upgrade_layout(root: Path) -> None:
    """Convert a layout-1 or layout-2 folder to layout 3 in place (see ``FileStore.upgrade``)."""
    marker = root / FILESTORE_MARKER
    try:
        layout = marker.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(
            f"{root} is not an actorflow FileStore (no {FILESTORE_MARKER})"
        ) from None
    if layout not in (LAYOUT, LAYOUT_2, _LAYOUT_1):
        open_layout(root)  # raises the error that names what is wrong
    packs = root / PACKS
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if layout == _LAYOUT_1:
            packs.mkdir(exist_ok=True)
            _pack_layout_1(root, packs)
        if layout != LAYOUT:
            # The commit point: from here on the folder is layout 3 (whose packs are
            # layout 2's; it adds segments, which only layout 3 reads).
            _write_small(root, marker, LAYOUT, replace=True)
        for old in ("checkpoints", "blobs"):
            shutil.rmtree(root / old, ignore_errors=True)
        fsync_dir(root)
    except OSError as exc:
        raise CheckpointError(f"could not upgrade the FileStore at {root}: {exc}") from exc
    finally:
        os.close(fd)


def _pack_layout_1(root: Path, packs: Path) -> None:
    """All of layout 1's blobs into one blob-only pack, each record into a record pack.

    Bytes are carried as they are, damaged or not, so ``verify`` reports the same
    problems afterwards. Re-running after a crash only duplicates blobs, which the
    next collection drops.
    """
    blobs: list[tuple[str, int, BlobSource]] = []
    folder = root / "blobs"
    for path in sorted(folder.glob("*/*")) if folder.is_dir() else []:
        if is_blob_digest(path.name):
            blobs.append((path.name, path.stat().st_size, path.read_bytes))
    if blobs:
        write_pack(packs, packs / _blob_pack_name(), b"", blobs)
    records = root / "checkpoints"
    for path in sorted(records.glob(f"*{'.ckpt'}")) if records.is_dir() else []:
        if path.name.startswith("."):
            continue
        final = packs / f"{path.name[: -len('.ckpt')]}{RECORD_SUFFIX}"
        if not final.exists():
            write_pack(packs, final, path.read_bytes(), [])


def _reader(path: Path, inode: int, span: tuple[int, int]) -> BlobSource:
    def read() -> bytes:
        data = read_spans(path, inode, [span])
        if data is None:
            raise CheckpointError(f"pack {path} changed during a collection")
        return data[0]

    return read


def _blob_pack_name() -> str:
    return f"{os.urandom(16).hex()}{BLOBS_SUFFIX}"


def _write_small(folder: Path, final: Path, data: bytes, *, replace: bool) -> None:
    """Durably put a small file in place: temp file, fsync, link or rename, folder fsync."""
    fd, tmp_name = tempfile.mkstemp(prefix=TMP, dir=folder)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, final)
        else:
            try:
                os.link(tmp, final)
            except FileExistsError:
                pass  # another process created the store at the same moment
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(folder)
