"""Conformance kit, part two: retention, concurrency, handles and damaged data.

Private: the public front is ``actorflow.storage.conformance``. Requires pytest.
"""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from actorflow.errors import CheckpointCorrupt, CheckpointNotFound
from actorflow.storage._format import Checkpoint, CheckpointKind, blob_digest
from actorflow.storage._protocol import CheckpointStore

from ._base import (
    RICH_METADATA,
    WAIT_S,
    KitBase,
    StoreFactory,
    damage_hook,
    flip,
    join_children,
    make_checkpoint,
    save_lineage_in_child,
    save_new,
    truncate,
)


class StressTests(KitBase):
    """Retention, concurrent writers, several handles, and damage that must be caught."""

    # --- retention -----------------------------------------------------------------

    def test_has_blobs(self, store: CheckpointStore) -> None:
        """has_blobs() returns exactly the stored subset and tolerates any string."""
        save_new(store, chunks={"e": [b"x", b"y"]})
        x, y, z = (blob_digest(v) for v in (b"x", b"y", b"z"))
        assert store.has_blobs([x, z, "", "../etc", y]) == {x, y}
        assert store.has_blobs([]) == set()

    def test_delete(self, store: CheckpointStore) -> None:
        """delete() removes one record and the blobs only it used, nothing else."""
        a = save_new(store, session="s", chunks={"e": [b"shared", b"a-only"]})
        b = save_new(store, session="s", parent=a, chunks={"e": [b"shared", b"b-only"]})
        store.delete(b.id)
        with pytest.raises(CheckpointNotFound):
            store.load(b.id)
        with pytest.raises(CheckpointNotFound):
            store.delete(b.id)
        assert store.list() == [a]
        digests = [blob_digest(v) for v in (b"shared", b"a-only", b"b-only")]
        assert store.has_blobs(digests) == set(digests[:2])
        store.delete(a.id)
        assert store.has_blobs(digests) == set()
        assert store.sessions() == []
        assert store.verify() == []

    def test_blobs_shared_across_sessions(self, store: CheckpointStore) -> None:
        """A blob used by two sessions is stored once and lives until both let it go."""
        digest = blob_digest(b"common")
        a = save_new(store, session="a", chunks={"e": [b"common"]})
        b, _ = make_checkpoint(session="b", chunks={"e": [b"common"]})
        store.save(b, {})
        store.delete(a.id)
        assert store.load_blob(digest) == b"common"
        assert store.prune("b", 0) == 1
        assert store.has_blobs([digest]) == set()

    def test_prune_keeps_newest_and_orphans_no_blob(self, store: CheckpointStore) -> None:
        """prune() keeps the newest N of a session and frees only blobs nobody keeps."""
        lineage: list[Checkpoint] = []
        for i in range(5):
            chunks = {"e": [b"session-wide", f"own-{i}".encode()]}
            parent = lineage[-1] if lineage else None
            lineage.append(save_new(store, session="s", parent=parent, chunks=chunks))
        other = save_new(store, session="t", chunks={"e": [b"own-0"]})
        own = [blob_digest(f"own-{i}".encode()) for i in range(5)]
        assert store.prune("s", 2) == 3
        assert store.list(session="s") == lineage[3:]
        assert store.list(session="t") == [other]
        assert store.has_blobs(own) == {own[0], own[3], own[4]}
        assert store.load_blob(blob_digest(b"session-wide")) == b"session-wide"
        assert store.verify() == []
        assert store.prune("s", 2) == 0
        assert store.prune("missing", 1) == 0
        assert store.prune("s", 0) == 2
        assert store.sessions() == ["t"]
        assert store.has_blobs(own) == {own[0]}

    def test_prune_counts_cuts_and_partial_records_follow_their_parent(
        self, store: CheckpointStore
    ) -> None:
        """prune(keep=N) keeps N cuts; a partial record stays exactly when its parent does."""
        first = save_new(store, session="s")
        early = save_new(store, session="s", parent=first, kind=CheckpointKind.PARTIAL)
        cut = save_new(store, session="s", parent=first)
        # A crash mid-superstep: the newest records are partial parts on top of ``cut``.
        parts = [
            save_new(store, session="s", parent=cut, kind=CheckpointKind.PARTIAL) for _ in range(2)
        ]
        assert store.prune("s", 1) == 2  # ``first`` and its partial ``early``
        assert store.list(session="s") == [cut, *parts]
        assert store.latest(session="s") == parts[-1]
        assert store.prune("s", 1) == 0
        assert store.prune("s", 0) == 3
        assert store.list(session="s") == []
        assert (
            store.has_blobs(d for cp in [first, early, cut, *parts] for d in cp.blob_digests())
            == set()
        )
        assert store.verify() == []

    def test_prune_rejects_negative_keep(self, store: CheckpointStore) -> None:
        """prune() with a negative keep raises ValueError and deletes nothing."""
        checkpoint = save_new(store, session="s")
        with pytest.raises(ValueError, match="keep"):
            store.prune("s", -1)
        assert store.list() == [checkpoint]

    def test_gc_racing_saves_orphans_nothing(self, store: CheckpointStore) -> None:
        """Deletes collecting a blob never strand a concurrent save that reuses it."""
        shared = b"contended"
        barrier = threading.Barrier(2, timeout=WAIT_S)

        def keep() -> None:
            barrier.wait()
            parent = None
            for _ in range(30):
                parent = save_new(store, session="keep", parent=parent, chunks={"e": [shared]})

        def churn() -> None:
            barrier.wait()
            for _ in range(30):
                store.delete(save_new(store, session="churn", chunks={"e": [shared]}).id)

        with ThreadPoolExecutor(2) as pool:
            for future in [pool.submit(keep), pool.submit(churn)]:
                future.result(timeout=WAIT_S)
        assert len(store.list(session="keep")) == 30
        assert store.load_blob(blob_digest(shared)) == shared
        assert store.verify() == []

    # --- concurrency and handles -----------------------------------------------------

    def test_concurrent_threads_lose_nothing(self, store: CheckpointStore) -> None:
        """Eight threads saving lineages that share a blob lose and damage nothing."""
        threads, count = 8, 10
        barrier = threading.Barrier(threads, timeout=WAIT_S)

        def lineage(n: int) -> list[Checkpoint]:
            barrier.wait()
            saved: list[Checkpoint] = []
            for i in range(count):
                chunks = {"shared": [b"shared"], "own": [f"{n}/{i}".encode()]}
                parent = saved[-1] if saved else None
                saved.append(save_new(store, session=f"t{n}", parent=parent, chunks=chunks))
            return saved

        with ThreadPoolExecutor(threads) as pool:
            futures = [pool.submit(lineage, n) for n in range(threads)]
            lineages = [f.result(timeout=WAIT_S) for f in futures]
        assert len(store.list()) == threads * count
        for n, saved in enumerate(lineages):
            assert store.history(saved[-1].id) == saved[::-1]
            assert store.latest(session=f"t{n}") == saved[-1]
        assert store.verify() == []

    def test_concurrent_processes_lose_nothing(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """Four processes saving into one store at once lose and damage nothing."""
        if not getattr(store_factory, "multiprocess", False):
            pytest.skip(f"{type(store_factory).__name__} is not shared across processes")
        processes, count = 4, 10
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(processes)
        results = ctx.Queue()
        children = [
            ctx.Process(
                target=save_lineage_in_child,
                kwargs={
                    "factory": store_factory,
                    "session": f"p{n}",
                    "count": count,
                    "shared": b"shared",
                    "barrier": barrier,
                    "results": results,
                },
            )
            for n in range(processes)
        ]
        for child in children:
            child.start()
        try:
            reports = join_children(children, results, processes)
        finally:
            results.close()
            results.join_thread()
        assert [r for r in reports if r[1] is not None] == []
        assert len(reports) == processes
        assert [c.exitcode for c in children] == [0] * processes
        for n in range(processes):
            lineage = store.list(session=f"p{n}")
            assert len(lineage) == count
            assert store.history(lineage[-1].id) == lineage[::-1]
        assert store.verify() == []

    def test_second_handle_sees_saves(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A second store from the factory, opened before and used after saves through the
        first, reads and writes the same data (stores that cannot have a second handle, like
        MemoryStore, leave this test out)."""
        other = store_factory()
        try:
            assert other is not store, (
                "the factory returned the same object: a store with no second handle should"
                " leave test_second_handle_sees_saves out (set it to None in its test class)"
            )
            assert other.latest() is None
            first = save_new(store, chunks={"e": [b"from the first handle"]})
            assert other.latest() == first
            assert other.load(first.id) == first
            assert (
                other.load_blob(blob_digest(b"from the first handle")) == b"from the first handle"
            )
            second = save_new(other, parent=first)
            assert store.latest() == second
            assert store.load(second.id) == second
            store.delete(first.id)
            assert [cp.id for cp in other.list()] == [second.id]
        finally:
            other.close()

    def test_data_survives_close_and_reopen(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """Everything saved is there after close() and a fresh open (durable stores)."""
        if not getattr(store_factory, "durable", False):
            pytest.skip(f"{type(store_factory).__name__} is not durable")
        saved = [save_new(store, chunks={"e": [b"kept"]})]
        saved.append(save_new(store, parent=saved[0], metadata=RICH_METADATA))
        store.close()
        store.close()  # idempotent
        reopened = store_factory()
        try:
            assert reopened.list() == saved
            assert reopened.load_blob(blob_digest(b"kept")) == b"kept"
            assert reopened.verify() == []
        finally:
            reopened.close()

    # --- damage ------------------------------------------------------------------------

    def test_truncated_record_raises_corrupt(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A truncated record raises CheckpointCorrupt from load, list and latest."""
        corrupt_record = damage_hook(store_factory, "corrupt_record")
        checkpoint = save_new(store)
        corrupt_record(checkpoint.id, truncate)
        for read in (lambda: store.load(checkpoint.id), store.list, store.latest):
            with pytest.raises(CheckpointCorrupt):
                read()

    def test_bitflipped_record_raises_corrupt(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """One flipped bit at the start, middle or end of a record is detected."""
        corrupt_record = damage_hook(store_factory, "corrupt_record")
        for position in (0, 40, 150, -1):
            checkpoint = save_new(store, metadata=RICH_METADATA)
            corrupt_record(checkpoint.id, flip(position))
            with pytest.raises(CheckpointCorrupt):
                store.load(checkpoint.id)
            store.delete(checkpoint.id)

    def test_corrupt_blob_raises_corrupt(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A flipped or truncated blob raises CheckpointCorrupt naming its digest."""
        corrupt_blob = damage_hook(store_factory, "corrupt_blob")
        save_new(store, chunks={"e": [b"flip me", b"cut me short"]})
        for value, mutate in ((b"flip me", flip(3)), (b"cut me short", truncate)):
            digest = blob_digest(value)
            corrupt_blob(digest, mutate)
            with pytest.raises(CheckpointCorrupt, match=digest):
                store.load_blob(digest)

    def test_latest_does_not_skip_corrupt(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A damaged newest record makes latest() raise, never fall back to an older one."""
        corrupt_record = damage_hook(store_factory, "corrupt_record")
        older = save_new(store, session="s")
        newest = save_new(store, session="s", parent=older)
        corrupt_record(newest.id, flip(-1))
        with pytest.raises(CheckpointCorrupt):
            store.latest()
        with pytest.raises(CheckpointCorrupt):
            store.latest(session="s")
        assert store.load(older.id) == older

    def test_corrupt_record_can_be_deleted(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A damaged record can be deleted, after which the store is healthy again."""
        corrupt_record = damage_hook(store_factory, "corrupt_record")
        kept = save_new(store)
        damaged = save_new(store)
        corrupt_record(damaged.id, truncate)
        store.delete(damaged.id)
        assert store.list() == [kept]
        assert store.verify() == []

    def test_verify_reports_problems(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """verify() names a damaged record and a damaged blob."""
        corrupt_record = damage_hook(store_factory, "corrupt_record")
        corrupt_blob = damage_hook(store_factory, "corrupt_blob")
        healthy = save_new(store)
        damaged = save_new(store)
        uses_bad_blob = save_new(store, chunks={"e": [b"soon damaged"]})
        assert store.verify() == []
        corrupt_record(damaged.id, flip(-1))
        corrupt_blob(blob_digest(b"soon damaged"), flip(0))
        problems = store.verify()
        assert any(damaged.id in p for p in problems)
        assert any(blob_digest(b"soon damaged") in p for p in problems)
        assert any(uses_bad_blob.id in p for p in problems)
        assert not any(healthy.id in p for p in problems)

    def test_verify_reports_parent_never_stored(self, store: CheckpointStore) -> None:
        """A parent id that was never stored is a problem; a deleted parent is not."""
        ghost, _ = make_checkpoint()
        orphan = save_new(store, parent=ghost)
        parent = save_new(store)
        child = save_new(store, parent=parent)
        store.delete(parent.id)
        problems = store.verify()
        assert len(problems) == 1
        assert orphan.id in problems[0]
        assert ghost.id in problems[0]
        assert store.history(child.id) == [child]
