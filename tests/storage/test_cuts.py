"""The runtime's records in flat form (cuts): stores keep them or turn them into checkpoints."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import actorflow as af
from actorflow.errors import CheckpointCorrupt
from actorflow.runtime.checkpoints import decode_runtime
from actorflow.storage import (
    Checkpoint,
    FileStore,
    Lease,
    MemoryStore,
    blob_digest,
    cut_saver,
    encode_checkpoint,
    new_checkpoint_id,
)
from actorflow.storage._cut import Cut, packed_metadata
from actorflow.storage.conformance._factories import MemoryStoreFactory

CHUNK = b"state"
DIGEST = blob_digest(CHUNK)


def cut(
    *, parent: str | None = None, metadata: Mapping[str, Any] | None = None, kind: str = "step"
) -> Cut:
    return Cut(
        id=new_checkpoint_id(),
        parent_id=parent,
        session="s",
        workflow="w",
        graph_signature="g" * 64,
        superstep=3,
        kind=kind,
        created_at=1_700_000_000.25,
        executors=(("a", (DIGEST,)), ("b", ())),
        runtime=b"\x80",
        metadata=packed_metadata(metadata or {}),
    )


class Counting(MemoryStore):
    """Changes save(), so it must see every record, cuts included."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[Checkpoint] = []

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        self.saved.append(checkpoint)
        super().save(checkpoint, blobs, lease=lease)


class Proxy:
    """Forwards everything to a MemoryStore, except that it records saves."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.saved: list[str] = []

    def save(
        self, checkpoint: Checkpoint, blobs: Mapping[str, bytes], *, lease: Lease | None = None
    ) -> None:
        self.saved.append(checkpoint.id)
        self.inner.save(checkpoint, blobs, lease=lease)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_memory_store_reads_a_cut_back_as_the_record_save_would_have_stored() -> None:
    """Every read of a kept cut gives the checkpoint that saving ``cut.checkpoint()`` gives."""
    kept, saved = MemoryStore(), Counting()
    metadata = {"tags": ["x", "y"], "nested": {"n": [1, 2.5, None, True]}, "raw": b"\x00"}
    first = cut(metadata=metadata)
    second = cut(parent=first.id, kind="final")
    for c in (first, second):
        cut_saver(kept)(c, {DIGEST: CHUNK})
        cut_saver(saved)(c, {DIGEST: CHUNK})
    assert [cp.id for cp in saved.saved] == [first.id, second.id]

    def records(store: MemoryStore) -> list[bytes]:
        latest = store.latest(session="s")
        assert latest is not None
        return [
            *(encode_checkpoint(store.load(c.id)) for c in (first, second)),
            *(encode_checkpoint(cp) for cp in store.list(session="s")),
            *(encode_checkpoint(cp) for cp in store.history(second.id)),
            encode_checkpoint(latest),
        ]

    expected = records(saved)
    assert records(kept) == expected
    assert records(kept) == expected  # read again: the encoded form it now holds
    assert kept.load(first.id).metadata == metadata
    assert kept.verify() == []


def test_only_a_store_that_defines_save_and_save_cut_together_takes_cuts(tmp_path: Path) -> None:
    """A subclass or a proxy that changes save() sees every record; others get checkpoints."""
    plain = MemoryStore()
    assert cut_saver(plain) == plain.save_cut
    counting, proxy = Counting(), Proxy()
    with FileStore(tmp_path / "files") as files:
        given = {}
        for name, store in (("counting", counting), ("proxy", proxy), ("files", files)):
            c = given[name] = cut()
            cut_saver(store)(c, {DIGEST: CHUNK})
            assert encode_checkpoint(store.load(c.id)) == encode_checkpoint(c.checkpoint())
    assert [cp.id for cp in counting.saved] == [given["counting"].id]
    assert proxy.saved == [given["proxy"].id]


def test_cuts_keep_the_store_rules_of_save() -> None:
    """A cut naming a blob nobody gave is refused; an id is stored once; the refused one is absent."""
    store = MemoryStore()
    orphan = cut()
    with pytest.raises(CheckpointCorrupt, match="neither given nor stored"):
        cut_saver(store)(orphan, {})
    assert store.list() == []
    good = cut()
    cut_saver(store)(good, {DIGEST: CHUNK})
    with pytest.raises(af.CheckpointError, match="already stored"):
        cut_saver(store)(good, {})
    with pytest.raises(CheckpointCorrupt, match="hashes to"):
        cut_saver(store)(cut(), {DIGEST: b"not the state"})


def test_a_damaged_cut_is_reported_when_read() -> None:
    """The conformance kit's damage hook reaches a kept cut too: the read raises, verify names it."""
    factory = MemoryStoreFactory()
    store = factory()
    c = cut()
    cut_saver(store)(c, {DIGEST: CHUNK})
    factory.corrupt_record(c.id, lambda data: data[:-3])
    with pytest.raises(CheckpointCorrupt, match=c.id):
        store.load(c.id)
    assert any(c.id in problem for problem in store.verify())


def test_prune_and_delete_collect_the_blobs_of_kept_cuts() -> None:
    """Reference counts of cuts and of saved records are one: deleting both frees the blob."""
    store = MemoryStore()
    first = cut()
    cut_saver(store)(first, {DIGEST: CHUNK})
    second = cut(parent=first.id)
    cut_saver(store)(second, {})
    store.save(cut(parent=second.id).checkpoint(), {})
    assert store.prune("s", keep=1) == 2
    assert store.has_blobs([DIGEST]) == {DIGEST}
    (last,) = store.list(session="s")
    store.delete(last.id)
    assert store.has_blobs([DIGEST]) == set()
    assert store.verify() == []


class Counter(af.Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.seen: list[int] = []

    @af.handler
    def on_num(self, n: int, ctx: af.Context[int]) -> None:
        self.seen.append(n)
        if n < 30:
            ctx.send(n + 1)
        else:
            ctx.output(len(self.seen))


@pytest.mark.timeout(60)
def test_records_of_a_long_run_in_a_memory_store_cost_the_cycle_collector_nothing() -> None:
    """After a few collections, no record a MemoryStore holds is tracked: collections then
    cost as little with a hundred thousand records as with none."""
    store = MemoryStore()
    builder = af.WorkflowBuilder("loop", start=Counter("a"))
    builder.add_edge("a", Counter("b")).add_edge("b", "a")
    with builder.build() as wf, wf.session("s", store=store) as session:
        assert session.run(0, metadata={"who": "test", "n": [1, 2]}).outputs == [16]
    latest = store.latest(session="s")  # read: its cut is now held encoded
    assert latest is not None
    store.save(dataclasses.replace(latest, id=new_checkpoint_id(), parent_id=latest.id), {})
    for _ in range(5):  # each collection untracks one more level of nested tuples
        gc.collect()
    with store._lock:
        entries = list(store._index.values())
    assert len(entries) == 34  # entry, 31 steps, final, and the copy
    assert [e for e in entries if gc.is_tracked(e)] == []


@pytest.mark.timeout(60)
def test_cuts_written_in_the_background_make_the_same_lineage() -> None:
    """With async durability the writer thread saves the cuts: the lineage and states equal
    those of a sync run, every parent is stored, and the store verifies clean."""
    lineages = {}
    for durability in (af.Durability.SYNC, af.Durability.ASYNC):
        store = MemoryStore()
        builder = af.WorkflowBuilder("loop", start=Counter("a"))
        builder.add_edge("a", Counter("b")).add_edge("b", "a")
        policy = af.CheckpointPolicy(durability=durability)
        with builder.build() as wf, wf.session("s", store=store, checkpoint=policy) as session:
            assert session.run(0).outputs == [16]
        records = store.list(session="s")
        ids = {cp.id for cp in records}
        assert all(cp.parent_id in ids for cp in records[1:])
        assert store.verify() == []
        lineages[durability] = [
            (cp.superstep, str(cp.kind), dict(cp.executors), _without_origin(cp.runtime))
            for cp in records
        ]
    assert lineages[af.Durability.ASYNC] == lineages[af.Durability.SYNC]


def _without_origin(runtime: bytes) -> dict[str, Any]:
    """A cut's runtime record but its session's origin (random per session)."""
    decoded = decode_runtime(runtime)
    assert isinstance(decoded.pop("origin"), str)
    return decoded
