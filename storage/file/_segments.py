"""FileStore's records in segments (layout 3): which ids the segments hold, and where.

Each store handle keeps, per segment file, the frames it has read so far and where
it stopped; a refresh lists the folder and reads only the frames appended since
(segments only grow, until a collection rewrites them under a new inode). Records
whose id is in the store's ``deleted`` list are gone: a segment's records cannot be
renamed away one by one (see ``_segment``). Reads take no lock, as pack reads do:
a frame is written once and never changed in place, and a segment that vanished
or changed inode under a reader sends it back to the folder.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from actorflow.errors import CheckpointCorrupt, CheckpointError

from ._pack import RECORD_SUFFIX, open_pack, read_record
from ._segment import SEGMENT_SUFFIX, Frame, scan_segment

__all__ = ["SegmentRecords", "read_deleted", "read_deleted_ids"]


@dataclass(slots=True)
class _Segment:
    inode: int
    end: int
    ids: dict[str, Frame]
    damage: str = ""
    size: int = 0
    """The file's size when it was last read: a torn tail is read again only once it grew."""


class SegmentRecords:
    """The live records of a folder's segments, as far as this handle has read them."""

    def __init__(self, packs: Path, deleted: Path) -> None:
        self._packs = packs
        self._deleted_path = deleted
        self._lock = threading.Lock()
        self._segments: dict[str, _Segment] = {}
        self._deleted: frozenset[str] = frozenset()
        self._deleted_stat: tuple[int, int, int] | None = None

    def refresh(self) -> None:
        """Read what was appended to every segment since the last refresh.

        Raises:
            CheckpointError: the folder cannot be listed.
        """
        try:
            with os.scandir(self._packs) as entries:
                found = [
                    e
                    for e in entries
                    if e.name.endswith(SEGMENT_SUFFIX) and not e.name.startswith(".")
                ]
        except FileNotFoundError as exc:
            raise CheckpointError(f"{self._packs} is missing: the store is damaged") from exc
        listed: dict[str, os.stat_result] = {}
        for entry in found:
            try:
                listed[entry.name] = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # unlinked since the folder was read: collected, its records moved
        with self._lock:
            for name in [n for n in self._segments if n not in listed]:
                del self._segments[name]
            # Only segments that are new, replaced or grown are opened and read.
            changed = [
                n
                for n, st in sorted(listed.items())
                if n not in self._segments
                or self._segments[n].inode != st.st_ino
                or (
                    self._segments[n].end < st.st_size
                    and self._segments[n].size != st.st_size
                    and not self._segments[n].damage
                )
            ]
        for name in changed:
            self._read(name)
        self._read_deleted()

    def note(self, segment: str, frame: Frame) -> None:
        """A frame this handle appended (so it need not read it back)."""
        assert frame.header is not None
        with self._lock:
            known = self._segments.get(segment)
            if known is None or known.inode != frame.header.inode:
                return  # not read yet: the next refresh reads it from the file
            if known.end == frame.start:
                known.ids.setdefault(frame.checkpoint_id, frame)
                known.end = frame.end

    def frames(self, segment: str, inode: int) -> tuple[list[Frame], int] | None:
        """The frames read so far of ``segment`` at ``inode``, in file order, and where
        they end; None if it was not read at that inode, or its reading stopped at damage.

        They cover the file from its start to that end without a gap (a refresh reads
        on from where the last stopped; :meth:`note` adds only a frame that starts
        there), so a reader of the same file may take them instead of reading it.
        """
        with self._lock:
            known = self._segments.get(segment)
            if known is None or known.inode != inode or known.damage:
                return None
            return sorted(known.ids.values(), key=lambda f: f.start), known.end

    def ids(self, *, strict: bool = True) -> set[str]:
        """Every live id (damaged records included) as of the last refresh.

        ``strict=False``: those that can be read, even if a segment is damaged.

        Raises:
            CheckpointCorrupt: (``strict``) a segment is damaged, so records after the
                damage cannot be listed, or a frame's id is (``verify`` names it).
        """
        if strict:
            self.check_whole("the store's records cannot all be listed")
        with self._lock:
            found = {i for s in self._segments.values() for i in s.ids}
        return found - self._deleted

    def check_whole(self, consequence: str) -> None:
        """Raise if what the segments hold may not be all there is (see :meth:`damage`).

        ``consequence``: what that means for the caller, for the message.

        Raises:
            CheckpointCorrupt: a segment is damaged (``verify`` names it).
        """
        damaged = self.damage()
        if damaged:
            raise CheckpointCorrupt(
                f"{damaged[0]}; {consequence} (store.verify() lists every problem; move the"
                " segment away to use the rest of the store)"
            )

    def damage(self) -> list[str]:
        """What may hide records in the segments, one line each (as of the last refresh):
        damage that stopped a segment's reading, and :meth:`misnamed` frames."""
        with self._lock:
            found = [s.damage for s in self._segments.values() if s.damage]
        return sorted(found) + self.misnamed()

    def misnamed(self) -> list[str]:
        """Live frames whose record names another id, one line each: that record may
        be the newest, hidden under a name that sorts elsewhere (or that another frame
        holds too), until the frame is deleted."""
        with self._lock:
            return sorted(
                f"segment {name}: the frame of {f.checkpoint_id} at offset {f.start} holds the"
                f" record of {f.other_id}: its id is damaged"
                for name, s in self._segments.items()
                for f in s.ids.values()
                if f.other_id and f.checkpoint_id not in self._deleted
            )

    def deleted(self) -> frozenset[str]:
        """The ids in the ``deleted`` list (as of the last refresh)."""
        return self._deleted

    def find(self, checkpoint_id: str) -> tuple[str, Frame] | None:
        """The segment and frame holding a live record, or None (as of the last refresh)."""
        if checkpoint_id in self._deleted:
            return None
        with self._lock:
            for name in sorted(self._segments):
                frame = self._segments[name].ids.get(checkpoint_id)
                if frame is not None:
                    return name, frame
        return None

    def read_record(self, checkpoint_id: str) -> bytes | None:
        """The record bytes of a live segment record; None if no segment holds it.

        Raises:
            CheckpointCorrupt: its frame's pack header is damaged, or the record is cut short.
            CheckpointError: the segment cannot be read.
        """
        for attempt in range(2):
            if attempt or self.find(checkpoint_id) is None:
                self.refresh()
            place = self.find(checkpoint_id)
            if place is None:
                return None
            name, frame = place
            if frame.header is None:
                raise CheckpointCorrupt(frame.damage)
            offset, length = frame.header.record
            try:
                fd, st = open_pack(self._packs / name)
            except FileNotFoundError:
                continue  # rewritten by a collection meanwhile: look again
            try:
                if st.st_ino != frame.header.inode:
                    continue
                data = os.pread(fd, length, offset)
            except OSError as exc:
                raise CheckpointError(f"cannot read segment {name}: {exc}") from exc
            finally:
                os.close(fd)
            if len(data) != length:
                raise CheckpointCorrupt(f"segment {name} is truncated inside a record")
            if length == 0:
                raise CheckpointCorrupt(
                    f"segment {name}: the frame of {checkpoint_id} has no record"
                )
            return data
        return None

    def read_elsewhere(self, checkpoint_id: str) -> tuple[bytes, str] | None:
        """A record that is not in its pack: its bytes and the file holding them, or None.

        From a segment, or from its pack after all if a collection moved it there
        meanwhile (the segment is unlinked only after the pack is in place).
        """
        pack = self._packs / f"{checkpoint_id}{RECORD_SUFFIX}"
        data = self.read_record(checkpoint_id)
        if data is not None:
            place = self.find(checkpoint_id)
            return data, place[0] if place is not None else pack.name
        try:
            return read_record(pack), pack.name
        except FileNotFoundError:
            return None

    def _read(self, name: str) -> None:
        with self._lock:
            known = self._segments.get(name)
            if known is not None:
                # A copy: :meth:`note` extends the entry in place (its ids, then its end)
                # while this reads the file, and the scan must start from the end that
                # goes with the ids it is given, or it meets a noted frame a second time.
                known = _Segment(known.inode, known.end, dict(known.ids), known.damage, known.size)
        try:
            fd, st = open_pack(self._packs / name)
        except FileNotFoundError:
            return
        except CheckpointCorrupt as exc:
            with self._lock:
                self._segments[name] = _Segment(0, 0, {}, str(exc))
            return
        try:
            if known is not None and known.inode == st.st_ino:
                if known.end >= st.st_size or known.damage or known.size == st.st_size:
                    return
                start = known.end
            else:
                known, start = _Segment(st.st_ino, 0, {}), 0
            scan = scan_segment(fd, name, st.st_ino, st.st_size, start, seen=known.ids.keys())
        except OSError as exc:
            raise CheckpointError(f"cannot read segment {name}: {exc}") from exc
        finally:
            os.close(fd)
        ids = known.ids  # this read's own copy (or a new entry's)
        for frame in scan.frames:
            ids.setdefault(frame.checkpoint_id, frame)
        end, size = scan.end, st.st_size
        with self._lock:
            current = self._segments.get(name)
            if current is not None and current.inode == st.st_ino and current.end > end:
                # This handle appended (and noted) frames past what this read saw, while
                # it read: they describe the same file further on, and stay indexed.
                ids.update(current.ids)
                end, size = current.end, max(size, current.size)
            self._segments[name] = _Segment(st.st_ino, end, ids, scan.damage, size)

    def _read_deleted(self) -> None:
        try:
            st = os.stat(self._deleted_path)
        except FileNotFoundError:
            self._deleted, self._deleted_stat = frozenset(), None
            return
        except OSError as exc:
            raise CheckpointError(f"cannot read {self._deleted_path}: {exc}") from exc
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._deleted_stat:
            self._deleted = frozenset(read_deleted_ids(self._deleted_path))
            self._deleted_stat = key


def read_deleted_ids(path: Path) -> set[str]:
    """The words of a ``deleted`` list; one that cannot be read gives none (``verify`` reports it)."""
    try:
        data = path.read_bytes()
    except OSError:
        return set()
    return {word.decode("ascii", "replace") for word in data.split()}


def read_deleted(path: Path, valid: re.Pattern[str]) -> tuple[set[str], str]:
    """The ids in a ``deleted`` list, and what is wrong with the file ("" if nothing)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set(), ""
    except OSError as exc:
        return set(), f"it cannot be read ({exc})"
    ids = {word.decode("ascii", "replace") for word in data.split()}
    bad = {i for i in ids if not valid.fullmatch(i)}
    return ids - bad, f"it holds {len(bad)} line(s) that are not checkpoint ids" if bad else ""
