"""FileStore layout 2 (packs, still written on request and read) beyond the conformance kit:
fsyncs, crashes, handles, upgrade. Layout 3 (segments): tests/storage/test_file_segments.py."""

from __future__ import annotations

import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from actorflow.errors import CheckpointCorrupt, UnsupportedFormat
from actorflow.storage import FileStore, blob_digest, encode_checkpoint
from actorflow.storage.conformance import FileStoreFactory, make_checkpoint
from actorflow.storage.file import _store as file_store
from actorflow.storage.file._pack import encode_header

pytestmark = pytest.mark.timeout(60)
WAIT_S = 45.0


def packs(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "packs").iterdir())


def test_a_save_is_one_pack_and_two_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint with new blobs costs one file, one file fsync and one folder fsync."""
    with FileStore(tmp_path, layout=2) as store:
        first, blobs = make_checkpoint(chunks={"e": [b"a", b"b", b"c"]})
        store.save(first, blobs)
        calls: list[int] = []
        real_fsync = os.fsync

        def counting_fsync(fd: int) -> None:
            calls.append(fd)
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", counting_fsync)
        second, more = make_checkpoint(parent=first, chunks={"e": [b"a", b"b", b"new"]})
        store.save(second, {d: more[d] for d in more if d not in blobs})
        monkeypatch.undo()
        assert len(calls) == 2
        assert packs(tmp_path) == sorted([f"{first.id}.pack", f"{second.id}.pack"])
        assert store.load_blobs(more) == more


def test_a_crash_before_the_link_leaves_no_trace(tmp_path: Path) -> None:
    """A whole, fsynced pack left under its temp name (killed before link) is invisible and collected."""
    checkpoint, blobs = make_checkpoint(chunks={"e": [b"only in the crashed pack"]})
    record = encode_checkpoint(checkpoint)
    with FileStore(tmp_path, layout=2) as store:
        kept, kept_blobs = make_checkpoint()
        store.save(kept, kept_blobs)
    crashed = tmp_path / "packs" / ".tmp-crashed"
    data = list(blobs.values())
    crashed.write_bytes(
        encode_header(len(record), [(d, len(v)) for d, v in blobs.items()])
        + record
        + b"".join(data)
    )
    with FileStore(tmp_path, layout=2) as store:
        assert store.list() == [kept]
        assert store.has_blobs(blobs) == set()
        assert store.verify() == []
        store.save(checkpoint, blobs)  # the id was never committed: saving it works
        store.delete(checkpoint.id)
        assert not crashed.exists()
        assert store.list() == [kept]
        assert store.verify() == []


def test_a_new_handle_finds_blobs_another_handle_wrote(tmp_path: Path) -> None:
    """A record may reference a blob stored through another store object, which finds it."""
    with FileStore(tmp_path, layout=2) as writer, FileStore(tmp_path) as other:
        assert other.has_blobs([blob_digest(b"shared")]) == set()  # other's index is now filled
        first, blobs = make_checkpoint(chunks={"e": [b"shared"]})
        writer.save(first, blobs)
        second, _ = make_checkpoint(parent=first, chunks={"e": [b"shared"]})
        other.save(second, {})  # not given: found in writer's pack
        assert other.load_blob(blob_digest(b"shared")) == b"shared"
    with FileStore(tmp_path, layout=2) as fresh:
        assert [cp.id for cp in fresh.list()] == [first.id, second.id]
        assert fresh.verify() == []


def test_a_collection_by_another_handle_is_noticed(tmp_path: Path) -> None:
    """A handle whose index still lists a collected blob does not save a record needing it."""
    with FileStore(tmp_path, layout=2) as a, FileStore(tmp_path, layout=2) as b:
        first, blobs = make_checkpoint(chunks={"e": [b"doomed"]})
        a.save(first, blobs)
        assert a.has_blobs(blobs) == set(blobs)
        b.delete(first.id)
        second, _ = make_checkpoint(chunks={"e": [b"doomed"]})
        with pytest.raises(CheckpointCorrupt, match="neither given nor stored"):
            a.save(second, {})
        assert a.has_blobs(blobs) == set()
        a.save(second, blobs)
        assert b.load_blob(blob_digest(b"doomed")) == b"doomed"


def test_two_handles_writing_concurrently_lose_nothing(tmp_path: Path) -> None:
    """Two store objects on one folder, saving and deleting in threads at once, lose nothing."""
    barrier = threading.Barrier(2, timeout=WAIT_S)

    def lineage(n: int) -> list[str]:
        with FileStore(tmp_path, layout=2) as store:
            barrier.wait()
            parent = None
            ids: list[str] = []
            for i in range(20):
                chunks = {"shared": [b"shared by both"], "own": [f"{n}/{i}".encode()]}
                checkpoint, blobs = make_checkpoint(session=f"s{n}", parent=parent, chunks=chunks)
                store.save(checkpoint, blobs)
                if i % 5 == 4:
                    store.prune(f"s{n}", 2)
                parent = checkpoint
                ids.append(checkpoint.id)
            return ids[-2:]

    with ThreadPoolExecutor(2) as pool:
        kept = [f.result(timeout=WAIT_S) for f in [pool.submit(lineage, n) for n in range(2)]]
    with FileStore(tmp_path, layout=2) as store:
        assert sorted(cp.id for cp in store.list()) == sorted(kept[0] + kept[1])
        assert store.load_blob(blob_digest(b"shared by both")) == b"shared by both"
        assert store.verify() == []


def test_delete_keeps_blobs_others_use_and_drops_the_rest(tmp_path: Path) -> None:
    """Deleting the record whose pack carries a shared blob moves that blob, drops its own."""
    with FileStore(tmp_path, layout=2) as store:
        first, blobs = make_checkpoint(chunks={"e": [b"shared", b"first only"]})
        store.save(first, blobs)
        second, _ = make_checkpoint(parent=first, chunks={"e": [b"shared"]})
        store.save(second, {})
        store.delete(first.id)
        assert f"{first.id}.pack" not in packs(tmp_path)
        assert store.has_blobs(blobs) == {blob_digest(b"shared")}
        store.delete(second.id)
        assert packs(tmp_path) == []
    with FileStore(tmp_path, layout=2) as fresh:
        assert fresh.has_blobs(blobs) == set()
        assert fresh.verify() == []


def test_collects_nothing_while_a_record_is_unreadable(tmp_path: Path) -> None:
    """If a record cannot be decoded, delete() keeps every blob (it may reference them)."""
    FileStore(tmp_path, layout=2).close()
    factory = FileStoreFactory(str(tmp_path))
    with factory() as store:
        damaged, damaged_blobs = make_checkpoint()
        store.save(damaged, damaged_blobs)
        factory.corrupt_record(damaged.id, lambda b: b"\x00")
        other, other_blobs = make_checkpoint()
        store.save(other, other_blobs)
        store.delete(other.id)
        assert store.has_blobs(damaged_blobs) == set(damaged_blobs)
        assert store.has_blobs(other_blobs) == set(other_blobs)
        store.delete(damaged.id)
        assert store.has_blobs([*damaged_blobs, *other_blobs]) == set()


def test_a_damaged_pack_header_is_reported(tmp_path: Path) -> None:
    """A pack whose header is damaged: its record raises CheckpointCorrupt, verify names it."""
    with FileStore(tmp_path, layout=2) as store:
        checkpoint, blobs = make_checkpoint()
        store.save(checkpoint, blobs)
    pack = tmp_path / "packs" / f"{checkpoint.id}.pack"
    data = bytearray(pack.read_bytes())
    data[20] ^= 0xFF  # inside the header: its checksum no longer matches
    pack.write_bytes(bytes(data))
    with FileStore(tmp_path, layout=2) as store:
        with pytest.raises(CheckpointCorrupt, match="header"):
            store.load(checkpoint.id)
        with pytest.raises(CheckpointCorrupt, match="damaged pack"):
            store.load_blob(next(iter(blobs)))
        assert any(checkpoint.id in p for p in store.verify())


def test_detects_a_record_under_another_name(tmp_path: Path) -> None:
    """A pack copied to another id's name is reported as corrupt."""
    with FileStore(tmp_path, layout=2) as store:
        checkpoint, blobs = make_checkpoint()
        store.save(checkpoint, blobs)
        impostor = make_checkpoint()[0].id
        folder = tmp_path / "packs"
        shutil.copy(folder / f"{checkpoint.id}.pack", folder / f"{impostor}.pack")
        with pytest.raises(CheckpointCorrupt, match=impostor):
            store.load(impostor)
        assert any(impostor in p for p in store.verify())


def test_refuses_a_newer_layout(tmp_path: Path) -> None:
    """A folder written with a newer layout raises UnsupportedFormat."""
    FileStore(tmp_path / "s").close()
    (tmp_path / "s" / "actorflow-store").write_bytes(b"actorflow FileStore layout 4\n")
    with pytest.raises(UnsupportedFormat, match="layout 4"):
        FileStore(tmp_path / "s")


def write_layout_1(root: Path, records: dict[str, bytes], blobs: dict[str, bytes]) -> None:
    """A folder as actorflow's FileStore layout 1 wrote it."""
    (root / "checkpoints").mkdir(parents=True)
    (root / "blobs").mkdir()
    (root / "actorflow-store").write_bytes(b"actorflow FileStore layout 1\n")
    for checkpoint_id, record in records.items():
        (root / "checkpoints" / f"{checkpoint_id}.ckpt").write_bytes(record)
    for digest, data in blobs.items():
        (root / "blobs" / digest[:2]).mkdir(exist_ok=True)
        (root / "blobs" / digest[:2] / digest).write_bytes(data)
    (root / "deleted").write_text("an-old-deleted-id\n")


def test_layout_1_is_refused_naming_the_upgrade_which_keeps_everything(tmp_path: Path) -> None:
    """A layout-1 folder raises UnsupportedFormat naming FileStore.upgrade; after it, all is there."""
    first, blobs = make_checkpoint(session="s", chunks={"e": [b"shared", b"one"]})
    second, more = make_checkpoint(session="s", parent=first, chunks={"e": [b"shared", b"two"]})
    write_layout_1(
        tmp_path,
        {cp.id: encode_checkpoint(cp) for cp in (first, second)},
        {**blobs, **more},
    )
    with pytest.raises(UnsupportedFormat, match=r"FileStore\.upgrade"):
        FileStore(tmp_path)
    FileStore.upgrade(tmp_path)
    FileStore.upgrade(tmp_path)  # idempotent
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "blobs").exists()
    with FileStore(tmp_path) as store:
        assert store.list() == [first, second]
        assert store.load_blobs({**blobs, **more}) == {**blobs, **more}
        assert store.verify() == []
        store.delete(first.id)
        assert store.has_blobs({**blobs, **more}) == set(more)
        assert store.verify() == []


def test_idle_sessions_go_a_batch_at_a_time_open_ones_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole-session retention holds one batch of lease locks at a time (an open file
    each); every batch deletes its idle sessions, none of the open ones."""
    monkeypatch.setattr(file_store, "_SESSIONS_A_BATCH", 3)
    with FileStore(tmp_path / "s") as store:
        for n in range(10):
            checkpoint, blobs = make_checkpoint(session=f"s{n}", chunks={"e": [b"%d" % n]})
            store.save(checkpoint, blobs)
        held = [store.acquire_lease(f"s{n}", "a worker", 60.0) for n in (1, 4, 9)]
        assert store.prune_older_than(time.time() + 60, whole_sessions=True) == 7
        assert store.sessions() == ["s1", "s4", "s9"]
        assert store.verify() == []
        for lease in held:
            store.release_lease(lease)
        assert store.prune_older_than(time.time() + 60, whole_sessions=True) == 3
        assert store.sessions() == []
