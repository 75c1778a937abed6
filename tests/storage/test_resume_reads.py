"""A resume reads only what it needs: the packs a record's hints name, the chunks that
differ from the blueprint; what it reads is still verified; and the chunks it hands a
host are framed in one copy."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgpack
import pytest

import actorflow as af
from actorflow.errors import CheckpointCorrupt
from actorflow.runtime._wire import pack, unpack
from actorflow.storage import Checkpoint, FileStore, blob_digest
from actorflow.storage.conformance import FileStoreFactory, make_checkpoint
from actorflow.storage.file import _packindex
from actorflow.storage.file._pack import HINT_MAGIC, encode_hints, read_header, read_pack_hints

pytestmark = pytest.mark.timeout(60)

SHARED = [os.urandom(64) for _ in range(5)]


def _history(root: Path, records: int) -> list[tuple[Checkpoint, dict[str, bytes]]]:
    """``records`` checkpoints of one lineage: the first stores SHARED chunks that every
    later record references again (not given), each record adds one chunk of its own."""
    saved: list[tuple[Checkpoint, dict[str, bytes]]] = []
    with FileStore(root, layout=2) as store:  # hints are in packs
        parent = None
        for i in range(records):
            own = f"step {i}".encode()
            checkpoint, blobs = make_checkpoint(
                parent=parent, chunks={"big": SHARED, "small": [own]}
            )
            store.save(checkpoint, blobs if parent is None else {blob_digest(own): own})
            saved.append((checkpoint, blobs))
            parent = checkpoint
    return saved


@pytest.fixture
def header_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pack headers the index reads (by scans and by hints), by file name."""
    names: list[str] = []
    real = read_header  # what _packindex calls

    def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(_packindex, "read_header", counting)
    return names


def test_a_fresh_handle_reads_only_the_packs_the_record_needs(
    tmp_path: Path, header_reads: list[str]
) -> None:
    """Resuming the latest of 40 records reads 2 pack headers, not 40, and saving on top scans nothing."""
    saved = _history(tmp_path, 40)
    latest, blobs = saved[-1]
    with FileStore(tmp_path) as store:
        assert store.latest(session=latest.session) == latest
        assert store.load_blobs(blobs) == blobs
        assert sorted(header_reads) == sorted([f"{saved[0][0].id}.pack", f"{latest.id}.pack"])
        after, more = make_checkpoint(parent=latest, chunks={"big": SHARED, "small": [b"next"]})
        store.save(after, {blob_digest(b"next"): more[blob_digest(b"next")]})
        assert len(header_reads) == 2
    with FileStore(tmp_path) as store:  # the new record's hints work too
        assert store.latest(session=latest.session) == after
        assert store.load_blobs(more) == more
        assert len(header_reads) == 4


def test_stale_hints_after_a_collection_fall_back_to_a_scan(tmp_path: Path) -> None:
    """Pruning moves the blobs the hints point at; a fresh handle still finds every one."""
    saved = _history(tmp_path, 6)
    with FileStore(tmp_path) as store:
        assert store.prune(saved[0][0].session, keep=2) == 4
    latest, blobs = saved[-1]
    with FileStore(tmp_path) as store:
        assert store.latest(session=latest.session) == latest
        assert store.load_blobs(blobs) == blobs
        assert store.verify() == []


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda hints: hints[:-3], id="truncated"),
        pytest.param(lambda hints: hints[:-1] + bytes([hints[-1] ^ 1]), id="bit-flipped"),
        pytest.param(lambda hints: b"garbage!" + hints[8:], id="bad-magic"),
    ],
)
def test_damaged_hints_are_ignored(tmp_path: Path, damage: Callable[[bytes], bytes]) -> None:
    """Hints are advice: damaged ones give no hint (a scan), never an error or a wrong blob."""
    saved = _history(tmp_path, 4)
    latest, blobs = saved[-1]
    pack = tmp_path / "packs" / f"{latest.id}.pack"
    data = pack.read_bytes()
    start = data.rindex(HINT_MAGIC)
    pack.write_bytes(data[:start] + damage(data[start:]))
    assert read_pack_hints(str(pack))[1] == []
    with FileStore(tmp_path) as store:
        assert store.latest(session=latest.session) == latest
        assert store.load_blobs(blobs) == blobs
        assert store.verify() == []


def test_hints_never_name_a_file_outside_the_packs_folder(tmp_path: Path) -> None:
    """Names with separators or a leading dot are dropped when hints are read."""
    saved = _history(tmp_path, 2)
    pack = tmp_path / "packs" / f"{saved[-1][0].id}.pack"
    data = pack.read_bytes()
    start = data.rindex(HINT_MAGIC)
    evil = ["../../outside.pack", ".lock", "/etc/passwd", "fine.pack"]
    pack.write_bytes(data[:start] + encode_hints(evil))
    assert read_pack_hints(str(pack))[1] == ["fine.pack"]


def test_a_corrupt_blob_found_through_hints_raises(tmp_path: Path) -> None:
    """A blob located through hints is verified against its digest like any other."""
    saved = _history(tmp_path, 5)
    latest, blobs = saved[-1]
    FileStoreFactory(str(tmp_path)).corrupt_blob(blob_digest(SHARED[2]), lambda b: b[:-1] + b"!")
    with FileStore(tmp_path) as store:
        assert store.latest(session=latest.session) == latest
        with pytest.raises(CheckpointCorrupt, match=blob_digest(SHARED[2])):
            store.load_blobs(blobs)


# --- the runtime: chunks equal to the blueprint's are not read ---------------------------


class Holder(af.Executor):
    """Holds a long list (several chunks) and appends to it."""

    def __init__(self, id: str, items: list[int]) -> None:
        super().__init__(id)
        self.items = items

    @af.handler
    def on_value(self, n: int, ctx: af.Context[Any]) -> None:
        self.items.append(n)
        ctx.output(len(self.items))


def _holder_workflow(items: Iterable[int] = range(2000)) -> af.Workflow:
    return af.WorkflowBuilder("holder", start=Holder("h", list(items))).build()


def _checkpoint_after_one_run(folder: Path) -> Checkpoint:
    """Run the holder once in session ``s`` on a FileStore in ``folder``; its last record."""
    with FileStore(folder) as store, _holder_workflow() as wf:
        with wf.session("s", store=store) as s:
            assert s.run(1).outputs == [2001]
        stored = store.latest(session="s")
    assert stored is not None
    return stored


class Recording:
    """Wraps a store's blob reads, recording the digests asked for."""

    def __init__(self, store: FileStore) -> None:
        self.asked: list[str] = []
        self.store = store
        real_many, real_one = store.load_blobs, store.load_blob

        def many(digests: Iterable[str]) -> dict[str, bytes]:
            wanted = list(digests)
            self.asked += wanted
            return real_many(wanted)

        def one(digest: str) -> bytes:
            self.asked.append(digest)
            return real_one(digest)

        store.load_blobs = many  # type: ignore[method-assign]
        store.load_blob = one  # type: ignore[method-assign]


def test_a_resume_reads_only_the_chunks_that_differ_from_the_blueprint(tmp_path: Path) -> None:
    """A grown list shares most chunks with the blueprint: only the others are read."""
    stored = _checkpoint_after_one_run(tmp_path)
    with FileStore(tmp_path) as store, _holder_workflow() as wf:
        blueprint = set(wf._spec.programs["h"].blueprint_digests)
        recording = Recording(store)
        with wf.resume(store, session="s") as s:
            assert s.run(2).outputs == [2002]
        changed = [d for d in stored.executors["h"] if d not in blueprint]
        assert 0 < len(changed) < len(stored.executors["h"])
        assert sorted(recording.asked) == sorted(changed)


def test_a_resume_with_another_blueprint_reads_every_chunk(tmp_path: Path) -> None:
    """Blueprint bytes stand in only for chunks with the same digest."""
    stored = _checkpoint_after_one_run(tmp_path)
    with FileStore(tmp_path) as store, _holder_workflow(range(5, 2005)) as wf:
        recording = Recording(store)
        with wf.resume(store, session="s") as s:
            assert s.run(2).outputs == [2002]
        assert sorted(recording.asked) == sorted(set(stored.executors["h"]))


def test_a_corrupt_changed_chunk_still_fails_the_resume(tmp_path: Path) -> None:
    """The chunks a resume does read are verified: damage raises CheckpointCorrupt."""
    stored = _checkpoint_after_one_run(tmp_path)
    with _holder_workflow() as probe:
        blueprint = set(probe._spec.programs["h"].blueprint_digests)
    changed = [d for d in stored.executors["h"] if d not in blueprint]
    FileStoreFactory(str(tmp_path)).corrupt_blob(changed[-1], lambda b: b[:-1] + b"\x00")
    # Resuming reads and checks every snapshot before any actor starts.
    with (
        FileStore(tmp_path) as store,
        _holder_workflow() as wf,
        pytest.raises(CheckpointCorrupt),
    ):
        wf.resume(store, session="s")


@pytest.mark.parametrize(
    "sizes",
    [[0], [1, 255, 256, 65535, 65536, 70000], [5] * 15, [5] * 16, [3] * 65536],
    ids=["empty-chunk", "every-bin-size", "fixarray", "array16", "array32"],
)
def test_a_list_of_chunks_is_framed_exactly_as_msgpack_frames_it(sizes: list[int]) -> None:
    """The one-copy framing of a restore's chunks is byte-identical to msgpack's."""
    chunks = [os.urandom(n) for n in sizes]
    assert pack(chunks) == msgpack.packb(chunks, use_bin_type=True)
    assert unpack(pack(chunks)) == chunks
