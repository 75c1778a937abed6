"""FileStore layout 3 (segments) beyond the conformance kit: syncs, torn tails, damage, upgrade."""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actorflow.errors import CheckpointCorrupt, CheckpointError, StoreClosed
from actorflow.storage import Checkpoint, FileStore, encode_checkpoint
from actorflow.storage.conformance import FileStoreFactory, make_checkpoint
from actorflow.storage.file._segment import Frame, encode_frame_prefix, scan_segment

pytestmark = pytest.mark.timeout(60)


def files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "packs").iterdir())


def segments(root: Path) -> list[Path]:
    return sorted((root / "packs").glob("*.seg"))


def test_a_save_is_one_frame_and_one_fdatasync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a handle's first save, a checkpoint costs one fdatasync and no new file."""
    with FileStore(tmp_path) as store:
        assert store.layout == 3
        first, blobs = make_checkpoint(chunks={"e": [b"a", b"b", b"c"]})
        store.save(first, blobs)
        before = files(tmp_path)
        calls: list[str] = []

        def counted(name: str, real: Callable[[int], None]) -> Callable[[int], None]:
            def call(fd: int) -> None:
                calls.append(name)
                real(fd)

            return call

        monkeypatch.setattr(os, "fsync", counted("fsync", os.fsync))
        monkeypatch.setattr(os, "fdatasync", counted("fdatasync", os.fdatasync))
        second, more = make_checkpoint(parent=first, chunks={"e": [b"a", b"b", b"new"]})
        store.save(second, {d: more[d] for d in more if d not in blobs})
        monkeypatch.undo()
        assert calls == ["fdatasync"]
        assert files(tmp_path) == before and len(before) == 1
        assert store.load_blobs(more) == more
    with FileStore(tmp_path) as fresh:
        assert fresh.list() == [first, second]
        assert fresh.load_blobs(more) == more
        assert fresh.verify() == []


def test_a_torn_tail_is_invisible_and_collected(tmp_path: Path) -> None:
    """A frame cut short at a segment's end (a save killed mid-write) is no record, no
    problem, and the next collection drops it."""
    with FileStore(tmp_path) as store:
        kept, kept_blobs = make_checkpoint(chunks={"e": [b"kept"]})
        store.save(kept, kept_blobs)
    checkpoint, blobs = make_checkpoint(chunks={"e": [b"never committed"]})
    [segment] = segments(tmp_path)
    record = encode_checkpoint(checkpoint)
    with open(segment, "ab") as f:  # the prefix promises more than was written
        f.write(encode_frame_prefix(checkpoint.id, len(record) + 500) + record[:40])
    with FileStore(tmp_path) as store:
        assert store.list() == [kept]
        assert store.latest() == kept
        assert store.verify() == []
        store.save(checkpoint, blobs)  # never committed: saving the id works
        assert store.list() == [kept, checkpoint]
        store.delete(checkpoint.id)
        assert store.list() == [kept]
        assert store.has_blobs({**blobs, **kept_blobs}) == set(kept_blobs)
        assert store.verify() == []
    for path in segments(tmp_path):
        with open(path, "rb") as f:
            assert not scan_segment(f.fileno(), path.name, 0, path.stat().st_size).torn


def test_a_damaged_frame_prefix_is_reported_never_skipped(tmp_path: Path) -> None:
    """A flipped bit in a frame's prefix: listing raises (it may hide the newest record),
    verify names the segment, records before it still load."""
    with FileStore(tmp_path) as store:
        first, blobs = make_checkpoint()
        store.save(first, blobs)
        second, more = make_checkpoint(parent=first)
        store.save(second, more)
    [segment] = segments(tmp_path)
    data = bytearray(segment.read_bytes())
    with open(segment, "rb") as f:
        frames = scan_segment(f.fileno(), segment.name, 0, len(data)).frames
    data[frames[1].start + 12] ^= 0x01  # the second frame's pack length
    segment.write_bytes(bytes(data))
    with FileStore(tmp_path) as store:
        with pytest.raises(CheckpointCorrupt, match="checksum"):
            store.latest()
        with pytest.raises(CheckpointCorrupt):
            store.list()
        assert store.load(first.id) == first
        assert any(segment.name in p for p in store.verify())


def test_deleting_rewrites_the_segment_keeping_the_rest(tmp_path: Path) -> None:
    """Deleting one record turns the segment's other records into packs and collects
    only the deleted record's own blobs."""
    with FileStore(tmp_path) as store:
        first, blobs = make_checkpoint(chunks={"e": [b"shared", b"first"]})
        store.save(first, blobs)
        second, more = make_checkpoint(parent=first, chunks={"e": [b"shared", b"second"]})
        store.save(second, {d: more[d] for d in more if d not in blobs})
        store.delete(first.id)
        names = files(tmp_path)
        assert f"{second.id}.pack" in names and f"{first.id}.pack" not in names
        assert segments(tmp_path) == []
        assert store.has_blobs({**blobs, **more}) == set(more)
        third, last = make_checkpoint(parent=second, chunks={"e": [b"shared", b"third"]})
        store.save(third, {d: last[d] for d in last if d not in more})  # a new segment
        assert len(segments(tmp_path)) == 1
        assert store.list() == [second, third]
        assert store.verify() == []
    with FileStore(tmp_path) as fresh:
        assert fresh.list() == [second, third]
        assert fresh.load_blobs(last) == last


def test_collects_nothing_while_a_segment_record_is_unreadable(tmp_path: Path) -> None:
    """A damaged record in a segment keeps every blob until it is deleted itself."""
    factory = FileStoreFactory(str(tmp_path))
    with factory() as store:
        damaged, damaged_blobs = make_checkpoint()
        store.save(damaged, damaged_blobs)
        other, other_blobs = make_checkpoint()
        store.save(other, other_blobs)
        factory.corrupt_record(damaged.id, lambda b: b[:-1])
        store.delete(other.id)
        assert store.has_blobs({**damaged_blobs, **other_blobs}) == {
            *damaged_blobs,
            *other_blobs,
        }
        assert any(damaged.id in p for p in store.verify())
        store.delete(damaged.id)
        assert store.has_blobs({**damaged_blobs, **other_blobs}) == set()
        assert store.verify() == []


def test_a_failed_sync_leaves_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the fdatasync fails, the frame is cut off again and the save raises; the next
    save goes to a new segment."""
    with FileStore(tmp_path) as store:
        first, blobs = make_checkpoint()
        store.save(first, blobs)
        size = segments(tmp_path)[0].stat().st_size

        def failing(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fdatasync", failing)
        second, more = make_checkpoint(parent=first)
        with pytest.raises(CheckpointError, match="Input/output error"):
            store.save(second, more)
        monkeypatch.undo()
        assert segments(tmp_path)[0].stat().st_size == size
        assert store.list() == [first]
        store.save(second, more)
        assert len(segments(tmp_path)) == 2
    with FileStore(tmp_path) as fresh:
        assert fresh.list() == [first, second]
        assert fresh.verify() == []


def test_handles_append_to_segments_of_their_own(tmp_path: Path) -> None:
    """Two handles saving in turn: each its own segment, each sees the other's records."""
    with FileStore(tmp_path) as a, FileStore(tmp_path) as b:
        saved = []
        parent = None
        for i in range(6):
            checkpoint, blobs = make_checkpoint(parent=parent, chunks={"e": [b"s", bytes([i])]})
            (a if i % 2 else b).save(checkpoint, blobs)
            saved.append(checkpoint)
            parent = checkpoint
            assert (b if i % 2 else a).latest() == checkpoint
        assert len(segments(tmp_path)) == 2
        assert a.list() == b.list() == saved
        with pytest.raises(CheckpointError, match="already"):
            a.save(saved[2], {})


def test_blobs_appended_after_a_segment_was_read_for_its_records_are_found(
    tmp_path: Path,
) -> None:
    """A handle reads another's segment for its records; more frames are appended to it;
    the blobs of those frames (and of the first) are found, in one handle and a fresh one."""
    with FileStore(tmp_path) as reader, FileStore(tmp_path) as writer:
        first, first_blobs = make_checkpoint(chunks={"e": [b"one", b"two"]})
        writer.save(first, first_blobs)
        assert reader.latest() == first  # the reader's record index has read the segment
        second, more = make_checkpoint(parent=first, chunks={"e": [b"one", b"three"]})
        writer.save(second, {d: more[d] for d in more if d not in first_blobs})
        assert reader.load_blobs(more) == more  # a frame the record index has not read
        assert reader.load_blobs(first_blobs) == first_blobs
        assert reader.latest() == second
    with FileStore(tmp_path) as fresh:
        assert fresh.latest() == second
        assert fresh.load_blobs({**first_blobs, **more}) == {**first_blobs, **more}
        assert fresh.verify() == []


def test_a_read_of_a_segment_never_drops_a_frame_noted_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread of a handle reads its segment (a save's frame appended, not noted yet)
    while another notes that frame and saves one more: the read, ending before the last
    frame, must not drop it from the handle's index (a listing would then miss a
    record that a save of this very handle returned)."""
    from actorflow.storage.file import _segments as _file_segments

    with FileStore(tmp_path) as store:
        records = store._segments
        assert records is not None
        first, first_blobs = make_checkpoint(chunks={"e": [b"one"]})
        store.save(first, first_blobs)
        assert store.latest() == first  # the index has read the segment
        appended, go_note = threading.Event(), threading.Event()
        scanning, go_scan = threading.Event(), threading.Event()
        real_note, real_scan = records.note, scan_segment  # what _file_segments calls

        def slow_note(segment: str, frame: Frame) -> None:
            if not appended.is_set():
                appended.set()
                assert go_note.wait(10)
            real_note(segment, frame)

        def slow_scan(*args: Any, **kwargs: Any) -> Any:
            scanning.set()
            assert go_scan.wait(10)
            return real_scan(*args, **kwargs)

        monkeypatch.setattr(records, "note", slow_note)
        monkeypatch.setattr(_file_segments, "scan_segment", slow_scan)
        second, more = make_checkpoint(parent=first, chunks={"e": [b"two"]})
        saver = threading.Thread(target=store.save, args=(second, more))
        saver.start()
        assert appended.wait(10)  # its frame is in the file, not in the index yet
        reader = threading.Thread(target=records.refresh)
        reader.start()
        assert scanning.wait(10)  # reading the segment from where the index ended
        go_note.set()
        saver.join(10)
        third, most = make_checkpoint(parent=second, chunks={"e": [b"three"]})
        store.save(third, most)  # noted: the index is at the segment's end again
        go_scan.set()
        reader.join(10)
        assert not saver.is_alive() and not reader.is_alive()
        assert {first.id, second.id, third.id} <= records.ids()
        assert records.find(third.id) is not None
        monkeypatch.undo()
        assert store.latest() == third
        assert store.list() == [first, second, third]


def test_a_forked_child_appends_to_a_segment_of_its_own(tmp_path: Path) -> None:
    """A handle inherited through fork(2) never appends where the parent's handle does."""
    with FileStore(tmp_path) as store:
        first, blobs = make_checkpoint(chunks={"e": [b"parent 1"]})
        store.save(first, blobs)
        pid = os.fork()
        if pid == 0:  # the child: one save, then out without running any cleanup
            code = 1
            try:
                child, more = make_checkpoint(session="child", chunks={"e": [b"child"]})
                store.save(child, more)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)  # bounded by the test's timeout
        assert os.waitstatus_to_exitcode(status) == 0
        second, more = make_checkpoint(parent=first, chunks={"e": [b"parent 2"]})
        store.save(second, more)
        assert len(segments(tmp_path)) == 2
        assert [cp.session for cp in store.list()] == ["session-a", "child", "session-a"]
        assert store.verify() == []


def test_layout_2_stays_layout_2_until_upgraded(tmp_path: Path) -> None:
    """A layout-2 folder is used as one (packs only) until FileStore.upgrade makes it layout 3."""
    with FileStore(tmp_path, layout=2) as store:
        first, blobs = make_checkpoint(chunks={"e": [b"shared", b"one"]})
        store.save(first, blobs)
    with FileStore(tmp_path) as store:
        assert store.layout == 2
        second, more = make_checkpoint(parent=first, chunks={"e": [b"shared", b"two"]})
        store.save(second, {d: more[d] for d in more if d not in blobs})
        assert segments(tmp_path) == []
    FileStore.upgrade(tmp_path)
    FileStore.upgrade(tmp_path)  # idempotent
    assert (tmp_path / "actorflow-store").read_bytes() == b"actorflow FileStore layout 3\n"
    with FileStore(tmp_path) as store:
        assert store.layout == 3
        third, last = make_checkpoint(parent=second, chunks={"e": [b"shared", b"three"]})
        store.save(third, {d: last[d] for d in last if d not in more})
        assert len(segments(tmp_path)) == 1
        assert store.list() == [first, second, third]
        store.prune(first.session, keep=1)
        assert store.list() == [third]
        assert store.load_blobs(last) == last
        assert store.verify() == []
    with pytest.raises(ValueError, match="layout"):
        FileStore(tmp_path / "other", layout=1)


def _eleven_in_one_segment(root: Path) -> list[Checkpoint]:
    """Eleven records of one lineage in one segment; the odd ones reuse a blob (hints)."""
    saved: list[Checkpoint] = []
    with FileStore(root) as store:
        parent = None
        for i in range(11):
            chunks = {"e": [b"shared" if i % 2 else os.urandom(8), f"own {i}".encode()]}
            checkpoint, blobs = make_checkpoint(parent=parent, chunks=chunks)
            store.save(checkpoint, {d: b for d, b in blobs.items() if not store.has_blobs({d})})
            saved.append(checkpoint)
            parent = checkpoint
    return saved


def _frames(segment: Path) -> list[Frame]:
    with open(segment, "rb") as f:
        scan = scan_segment(f.fileno(), segment.name, 0, segment.stat().st_size)
    assert not scan.torn and not scan.damage
    return scan.frames


def _pack_length(frame: Frame) -> int:
    return frame.end - frame.start - 24 - len(frame.checkpoint_id)


# Forged pack lengths of a frame in the middle of a segment (the crc32 recomputed, so
# the prefix checks out): each hides later frames unless the scanner catches it.
_LENGTHS: dict[str, Callable[[list[Frame], int, int], int]] = {
    "2**40": lambda frames, k, size: 1 << 40,
    "2**64-1": lambda frames, k, size: (1 << 64) - 1,
    "one past the end of the file": lambda frames, k, size: (
        size - frames[k].end + _pack_length(frames[k]) + 1
    ),
    "to the end of the file": lambda frames, k, size: (
        size - frames[k].end + _pack_length(frames[k])
    ),
    "over the next frame": lambda frames, k, size: (
        frames[k + 1].end - frames[k].end + _pack_length(frames[k])
    ),
    "over two frames": lambda frames, k, size: (
        frames[k + 2].end - frames[k].end + _pack_length(frames[k])
    ),
    "into the next frame's prefix": lambda frames, k, size: _pack_length(frames[k]) + 9,
    "into the next frame's pack header": lambda frames, k, size: _pack_length(frames[k]) + 60,
    "one byte short": lambda frames, k, size: _pack_length(frames[k]) - 1,
    "short by its hints": lambda frames, k, size: _pack_length(frames[k]) - 16,
    "half": lambda frames, k, size: _pack_length(frames[k]) // 2,
    "zero": lambda frames, k, size: 0,
}


@pytest.mark.parametrize("forgery", list(_LENGTHS))
@pytest.mark.parametrize("which", [4, 5])  # without hints, with hints
def test_a_forged_frame_length_never_hides_later_records(
    tmp_path: Path, forgery: str, which: int
) -> None:
    """A mid-segment frame whose pack length is forged (crc32 and all): listing and the
    newest record raise, verify reports it, no save or collection proceeds on it."""
    saved = _eleven_in_one_segment(tmp_path)
    [segment] = segments(tmp_path)
    frames = _frames(segment)
    data = bytearray(segment.read_bytes())
    length = _LENGTHS[forgery](frames, which, len(data))
    prefix = encode_frame_prefix(frames[which].checkpoint_id, length)
    data[frames[which].start : frames[which].start + len(prefix)] = prefix
    segment.write_bytes(bytes(data))
    with FileStore(tmp_path) as store:
        for read in (store.latest, store.list, store.sessions, store.ids):
            with pytest.raises(CheckpointCorrupt, match=segment.name):
                read()
        with pytest.raises(CheckpointCorrupt):
            store.latest(session=saved[-1].session)
        for hidden in saved[which + 1 :]:  # behind the damage: never "not found"
            with pytest.raises(CheckpointCorrupt, match=segment.name):
                store.load(hidden.id)
        with pytest.raises(CheckpointCorrupt):
            store.history(saved[-1].id)
        assert [store.load(cp.id) for cp in saved[:which]] == saved[:which]
        assert any(segment.name in p for p in store.verify())
        another, blobs = make_checkpoint(parent=saved[2])
        with pytest.raises(CheckpointCorrupt, match=segment.name):
            store.save(another, blobs)  # it could not be listed, nor resumed from
        with pytest.raises(CheckpointCorrupt):
            store.prune(saved[0].session, keep=1)
        store.delete(saved[0].id)  # listed in deleted; the segment is not collected
    assert segment.read_bytes() == bytes(data)
    segment.unlink()


@pytest.mark.parametrize("id_shift", [-3, 1, 8, 9])
def test_a_forged_id_length_never_hides_later_records(tmp_path: Path, id_shift: int) -> None:
    """A frame's id length moved and its pack length moved back (so the frame still
    ends where it did): a damaged record under a wrong id, which listing and verify
    report; latest is still the newest."""
    saved = _eleven_in_one_segment(tmp_path)
    [segment] = segments(tmp_path)
    frames = _frames(segment)
    data = segment.read_bytes()
    frame = frames[5]
    ident = data[frame.start + 24 : frame.start + 24 + len(frame.checkpoint_id) + id_shift]
    lengths = struct.pack(">IQ", len(ident), _pack_length(frame) - id_shift)
    prefix = b"AFSEGF01" + lengths + struct.pack(">I", zlib.crc32(lengths + ident)) + ident
    body = frame.start + 24 + len(frame.checkpoint_id) + id_shift
    segment.write_bytes(data[: frame.start] + prefix + data[body:])
    with FileStore(tmp_path) as store:
        try:
            latest = store.latest()
        except CheckpointCorrupt as exc:
            latest, why = None, str(exc)
            assert segment.name in why
        assert latest in (saved[-1], None)
        with pytest.raises(CheckpointCorrupt):
            store.list()
        assert store.verify() != []


def test_a_torn_tail_cut_anywhere_is_no_damage(tmp_path: Path) -> None:
    """A real frame cut short at any point (inside its prefix, pack header, record, blobs,
    just before or inside its hints) is a torn tail: no record, no problem."""
    saved = _eleven_in_one_segment(tmp_path)
    [segment] = segments(tmp_path)
    data = segment.read_bytes()
    last = _frames(segment)[-1]
    cuts = sorted({*range(last.start + 1, last.end, 7), last.end - 16, last.end - 15, last.end - 1})
    for cut in cuts:
        segment.write_bytes(data[:cut])
        with FileStore(tmp_path) as store:
            assert store.latest() == saved[-2], cut
            assert store.verify() == [], cut
    segment.write_bytes(data)


def test_a_torn_frame_followed_by_a_frame_is_damage(tmp_path: Path) -> None:
    """A frame running past the end of the file while a whole frame follows it (its
    length is damaged, the frames after it are real): reported, never a torn tail."""
    saved = _eleven_in_one_segment(tmp_path)
    [segment] = segments(tmp_path)
    frames = _frames(segment)
    data = segment.read_bytes()
    # Frame 7's bytes cut out of the middle of its pack: what remains of it is a
    # prefix that promises more than the file holds, and frames 8-10 follow it whole.
    cut = data[: frames[7].start + 70] + data[frames[8].start :]
    size = len(cut)
    prefix = encode_frame_prefix(frames[7].checkpoint_id, size)
    segment.write_bytes(cut[: frames[7].start] + prefix + cut[frames[7].start + len(prefix) :])
    with FileStore(tmp_path) as store:
        with pytest.raises(CheckpointCorrupt, match="follows"):
            store.latest()
        assert any("follows" in p for p in store.verify())
    assert saved


@pytest.mark.parametrize("name", ["older", "in another segment"])
def test_a_frame_named_after_another_record_is_reported(tmp_path: Path, name: str) -> None:
    """A frame whose id is forged (crc32 recomputed) to sort below the record it holds,
    or to repeat a record of another segment: that record is never silently left out."""
    with FileStore(tmp_path) as a, FileStore(tmp_path) as b:
        first, blobs = make_checkpoint(session="s")
        a.save(first, blobs)
        other, blobs = make_checkpoint(session="t")
        b.save(other, blobs)
        newest, blobs = make_checkpoint(session="s", parent=first)
        a.save(newest, blobs)
        last, blobs = make_checkpoint(session="t", parent=other)
        a.save(last, blobs)  # so that the forged frame is not its segment's last
    [segment] = [s for s in segments(tmp_path) if _frames(s)[0].checkpoint_id == first.id]
    frames = _frames(segment)
    assert [f.checkpoint_id for f in frames] == [first.id, newest.id, last.id]
    # Another id sorting below the newest record (its random suffix's last digit changed).
    older = first.id[:-1] + ("1" if first.id.endswith("0") else "0")
    forged = {"older": older, "in another segment": other.id}[name]
    assert forged < newest.id
    data = segment.read_bytes()
    frame = frames[1]
    body = data[frame.start + 24 + len(frame.checkpoint_id) : frame.end]
    prefix = encode_frame_prefix(forged, len(body))
    segment.write_bytes(data[: frame.start] + prefix + body + data[frame.end :])
    with FileStore(tmp_path) as store:
        for read in (lambda: store.latest(session="s"), store.list, store.sessions):
            with pytest.raises(CheckpointCorrupt, match=f"holds the record of {newest.id}"):
                read()
        with pytest.raises(CheckpointCorrupt, match=segment.name):
            store.load(newest.id)  # hidden under another name: never "not found"
        assert any(f"holds the record of {newest.id}" in p for p in store.verify())
        assert store.load(last.id) == last  # frames after it are read on


@pytest.mark.parametrize("read_before", [False, True], ids=["fresh-handle", "read-before"])
def test_a_listing_during_a_collection_never_misses_a_live_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_before: bool
) -> None:
    """A listing that a collection could overtake (one handle reads the folder and sees
    a segment; another deletes a record of that segment, which moves the segment's live
    records into packs and unlinks it; the first then reads the segments) still finds
    every live record: a session whose record moved must not look gone (an open
    holding its lease would find it vanished). The collection is started right where
    it would overtake the listing, and the listing goes on once it is done or waits
    on the store lock."""
    from actorflow.storage import _lock_wait
    from actorflow.storage.file import _lock as file_lock

    real_flock = _lock_wait.flock_within
    went_on = threading.Event()
    """Set once the collection is done, or waits for the lock the listing holds."""

    def watched_flock(fd: int, seconds: float | None, *, shared: bool = False) -> bool:
        if not shared:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                went_on.set()  # the listing holds the lock: the collection waits
        return real_flock(fd, seconds, shared=shared)

    monkeypatch.setattr(file_lock, "flock_within", watched_flock)
    with FileStore(tmp_path) as writer:
        kept, kept_blobs = make_checkpoint(session="kept", chunks={"e": [b"kept"]})
        writer.save(kept, kept_blobs)
        doomed, doomed_blobs = make_checkpoint(session="doomed", chunks={"e": [b"doomed"]})
        writer.save(doomed, doomed_blobs)
        assert len(segments(tmp_path)) == 1
        with FileStore(tmp_path) as reader:
            if read_before:
                assert reader.list() == [kept, doomed]
            records = reader._segments
            assert records is not None
            real_refresh = records.refresh

            def collect() -> None:
                writer.delete(doomed.id)
                went_on.set()

            collector = threading.Thread(target=collect)

            def overtaken_refresh() -> None:
                if collector.ident is None:  # the listing's own folder read came just before
                    collector.start()
                    assert went_on.wait(10)
                real_refresh()

            monkeypatch.setattr(records, "refresh", overtaken_refresh)
            assert reader.latest(session="kept") == kept
            collector.join(10)
            assert not collector.is_alive() and segments(tmp_path) == []
            assert reader.list() == [kept]
            assert reader.sessions() == ["kept"]


def test_listings_wait_for_no_lock_holder_but_a_collection(tmp_path: Path) -> None:
    """A listing takes no lock while no collection is under way, so another process
    holding the store lock (a save or an open stopped half-way) never holds it up; a
    collection that died half-way (its token still says collecting) makes listings
    take the shared lock, and the next collection clears that."""
    with FileStore(tmp_path) as store:
        first, blobs = make_checkpoint(chunks={"e": [b"one"]})
        store.save(first, blobs)
        doomed, more = make_checkpoint(chunks={"e": [b"two"]})
        store.save(doomed, more)
        lock = os.open(tmp_path / ".lock", os.O_RDWR)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held by "another process", not collecting
            assert store.latest() == doomed
            assert store.list() == [first, doomed]
            store._index.bump(lock)  # a collection that dies before it is done
            fcntl.flock(lock, fcntl.LOCK_UN)
        finally:
            os.close(lock)
        taken: list[bool] = []
        real_held = store._lock.held

        def counted(**kwargs: Any) -> Any:
            taken.append(kwargs["exclusive"])
            return real_held(**kwargs)

        store._lock.held = counted  # type: ignore[method-assign]
        assert store.list() == [first, doomed]
        assert taken == [False]  # under the shared lock
        store.delete(doomed.id)  # a collection: done, it clears the mark
        taken.clear()
        assert store.list() == [first]
        assert taken == []


def test_a_segment_unlinked_while_its_folder_is_read_is_no_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection unlinks a segment between a reader's folder listing and its look at
    that segment's size: the segment is gone, not the store (the reader said "packs is
    missing: the store is damaged"), and the listing finds the moved records."""
    with FileStore(tmp_path) as writer:
        kept, kept_blobs = make_checkpoint(session="kept", chunks={"e": [b"kept"]})
        writer.save(kept, kept_blobs)
        doomed, doomed_blobs = make_checkpoint(session="doomed", chunks={"e": [b"doomed"]})
        writer.save(doomed, doomed_blobs)
        with FileStore(tmp_path) as reader:
            real_scandir = os.scandir
            overtaken: list[bool] = []

            def overtaken_scandir(path: Any) -> Any:
                entries = list(real_scandir(path))  # (their stat is read later, lazily)
                if not overtaken:
                    overtaken.append(True)
                    writer.delete(doomed.id)  # unlinks the segment the entries name
                    assert segments(tmp_path) == []
                return _Listing(entries)

            monkeypatch.setattr(os, "scandir", overtaken_scandir)  # the first is the reader's
            assert reader.list() == [kept]
            assert overtaken
            assert reader.latest(session="kept") == kept


class _Listing(list[Any]):
    """A folder's entries, usable like ``os.scandir``'s iterator (a context manager)."""

    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


def test_a_listing_overtaken_by_close_raises_store_closed_and_leaks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() from another thread lands while a listing runs (between its two reads of
    the collection token): the listing raises StoreClosed, never a CheckpointError on a
    closed descriptor, and no descriptor of the lock file is opened again behind the
    close (one was, and stayed open)."""

    def lock_fds() -> list[str]:
        fds = Path("/proc/self/fd")
        found = []
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == str(tmp_path / ".lock"):
                    found.append(fd.name)
        return found

    store = FileStore(tmp_path)
    saved, blobs = make_checkpoint(chunks={"e": [b"one"]})
    store.save(saved, blobs)
    assert store.list() == [saved]  # the token's descriptor is open
    assert len(lock_fds()) == 1
    records = store._segments
    assert records is not None
    real_refresh = records.refresh

    def closing_refresh() -> None:
        closer = threading.Thread(target=store.close)
        closer.start()
        closer.join(10)
        assert not closer.is_alive()
        real_refresh()

    monkeypatch.setattr(records, "refresh", closing_refresh)
    with pytest.raises(StoreClosed):
        store.latest()
    assert lock_fds() == []
