"""The conformance kit: one pytest suite that every CheckpointStore passes.

Requires pytest (a test dependency, never a runtime one of actorflow). A backend,
built-in or third-party, is certified by one subclass and one fixture::

    import pytest
    from actorflow.storage.conformance import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return MyStoreFactory(str(tmp_path / "db"))

The factory (see :class:`StoreFactory`) opens the same store again on each call.
Optional capabilities switch on more tests; without them those tests are skipped
with the reason shown. ``docs/storage.md`` explains each one.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import random
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import pytest

from actorflow.errors import CheckpointCorrupt, CheckpointError, CheckpointNotFound

from ._factories import FileStoreFactory, MemoryStoreFactory, Mutation, SQLiteStoreFactory
from ._format import (
    Checkpoint,
    CheckpointKind,
    blob_digest,
    decode_checkpoint,
    encode_checkpoint,
    new_checkpoint_id,
)
from ._protocol import CheckpointStore

__all__ = [
    "FileStoreFactory",
    "MemoryStoreFactory",
    "SQLiteStoreFactory",
    "StoreConformance",
    "StoreFactory",
    "make_checkpoint",
]

_WAIT_S = 45.0  # bound on every wait for threads and processes (under pytest-timeout's 60 s)


class StoreFactory(Protocol):
    """What the ``store_factory`` fixture returns.

    Calling it returns a store on the same data each time (a new object for stores
    that can have several handles; in-memory stores may return the same object).
    The kit closes every store it opens. Optional attributes, looked up by name:

    - ``durable: bool`` -- data survives ``close()`` and a reopen (reopen tests).
    - ``multiprocess: bool`` -- stores opened in other processes share the data;
      the factory must then be picklable and its class importable by module path,
      because it is sent to ``spawn`` child processes (multi-process tests).
    - ``corrupt_record(checkpoint_id, mutate)`` / ``corrupt_blob(digest, mutate)``
      -- replace the stored bytes with ``mutate(stored bytes)`` (corruption tests).
    """

    def __call__(self) -> CheckpointStore: ...


def make_checkpoint(
    *,
    session: str = "session-a",
    workflow: str = "workflow-a",
    parent: Checkpoint | None = None,
    kind: CheckpointKind = CheckpointKind.STEP,
    chunks: Mapping[str, Sequence[bytes]] | None = None,
    metadata: Mapping[str, Any] | None = None,
    runtime: bytes = b"\x90",
) -> tuple[Checkpoint, dict[str, bytes]]:
    """A new record and the blobs it references, for tests.

    Args:
        chunks: executor id -> snapshot chunks; by default one executor with one
            random chunk, so the record references a blob of its own.

    Returns:
        The record (a fresh time-sortable id, ``parent``'s id as parent) and the
        digest -> bytes map to pass to ``save``.
    """
    if chunks is None:
        chunks = {"executor": [os.urandom(16)]}
    blobs = {blob_digest(c): c for cs in chunks.values() for c in cs}
    checkpoint = Checkpoint(
        id=new_checkpoint_id(),
        parent_id=None if parent is None else parent.id,
        session=session,
        workflow=workflow,
        graph_signature="ab" * 32,
        superstep=0 if parent is None else parent.superstep + 1,
        kind=kind,
        created_at=time.time(),
        executors={e: tuple(blob_digest(c) for c in cs) for e, cs in chunks.items()},
        runtime=runtime,
        metadata=dict(metadata or {}),
    )
    return checkpoint, blobs


def _save(store: CheckpointStore, *, parent: Checkpoint | None = None, **kwargs: Any) -> Checkpoint:
    checkpoint, blobs = make_checkpoint(parent=parent, **kwargs)
    store.save(checkpoint, blobs)
    return checkpoint


def _hook(factory: StoreFactory, name: str) -> Callable[[str, Mutation], None]:
    hook: Callable[[str, Mutation], None] | None = getattr(factory, name, None)
    if hook is None:
        pytest.skip(f"{type(factory).__name__} has no {name}() hook to damage stored bytes")
    return hook


def _flip(position: int) -> Mutation:
    def mutate(data: bytes) -> bytes:
        i = position % len(data)
        return data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1 :]

    return mutate


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _scribble(value: Any) -> None:
    """Mutate everything mutable reachable from ``value`` (the MAF #7683 reproduction)."""
    if isinstance(value, list):
        for item in value:
            _scribble(item)
        value.append("scribbled")
    elif isinstance(value, dict):
        for item in value.values():
            _scribble(item)
        value["scribbled"] = True
    elif isinstance(value, Mapping | tuple):
        for item in value.values() if isinstance(value, Mapping) else value:
            _scribble(item)


def _scribble_checkpoint(checkpoint: Checkpoint) -> None:
    _scribble(checkpoint.metadata)
    _scribble(checkpoint.executors)


_RICH_METADATA: dict[str, Any] = {
    "user": "ana",
    "turn": 7,
    "score": 0.25,
    "flags": [True, False, None],
    "nested": {"list": [1, [2, {"deep": b"\x00\xff"}]], "text": "naïve ✓"},
}


def _save_lineage_in_child(
    *,
    factory: StoreFactory,
    session: str,
    count: int,
    shared: bytes,
    barrier: Any,
    results: Any,
) -> None:
    """Child-process body of the multi-process test (module level so spawn finds it)."""
    try:
        store = factory()
        try:
            barrier.wait(timeout=_WAIT_S)
            parent = None
            for i in range(count):
                chunks = {"shared": [shared], "own": [f"{session}/{i}".encode()]}
                parent = _save(store, session=session, parent=parent, chunks=chunks)
        finally:
            store.close()
        results.put((session, None))
    except BaseException:
        results.put((session, traceback.format_exc()))
        raise


class StoreConformance:
    """The kit. Subclass it in a ``Test*`` class and override ``store_factory``."""

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        """Override: return a factory for the store under test (see StoreFactory)."""
        pytest.fail("override the store_factory fixture in your StoreConformance subclass")

    @pytest.fixture
    def store(self, store_factory: StoreFactory) -> Iterator[CheckpointStore]:
        """A store opened by the factory, closed after the test."""
        store = store_factory()
        yield store
        store.close()

    # --- round trips and ownership ---------------------------------------------

    def test_is_a_checkpoint_store(self, store: CheckpointStore) -> None:
        """The store satisfies the CheckpointStore protocol at runtime."""
        assert isinstance(store, CheckpointStore)

    def test_roundtrip_every_field(self, store: CheckpointStore) -> None:
        """Every field of every kind of record comes back equal and correctly typed."""
        first = _save(store, kind=CheckpointKind.ENTRY, chunks={})
        saved = [first]
        for kind in (CheckpointKind.STEP, CheckpointKind.RESPONSE, CheckpointKind.FINAL):
            chunks = {"a": [b"a1", b"a2"], "b": [os.urandom(8)], "c": [b"a1"]}
            saved.append(
                _save(
                    store,
                    parent=saved[-1],
                    kind=kind,
                    chunks=chunks,
                    metadata=_RICH_METADATA,
                    runtime=os.urandom(64),
                )
            )
        for original in saved:
            loaded = store.load(original.id)
            assert loaded == original
            assert isinstance(loaded.kind, CheckpointKind)
            assert all(isinstance(v, tuple) for v in loaded.executors.values())
            assert type(loaded.runtime) is bytes
            assert encode_checkpoint(loaded) == encode_checkpoint(original)

    def test_load_returns_callers_own_copy(self, store: CheckpointStore) -> None:
        """Mutating everything reachable from a loaded record changes no later load."""
        original = _save(store, metadata=_RICH_METADATA)
        _scribble_checkpoint(store.load(original.id))
        assert store.load(original.id) == original

    def test_list_and_latest_return_callers_own_copies(self, store: CheckpointStore) -> None:
        """Records from list() and latest() are the caller's own too (MAF #7683)."""
        original = _save(store, metadata=_RICH_METADATA)
        for checkpoint in store.list():
            _scribble_checkpoint(checkpoint)
        latest = store.latest()
        assert latest is not None
        _scribble_checkpoint(latest)
        assert store.list() == [original]
        assert store.latest() == original
        assert store.history(original.id) == [original]

    def test_mutating_saved_object_after_save_changes_nothing(self, store: CheckpointStore) -> None:
        """What was saved is fixed at save(): later changes to the caller's objects do not leak."""
        metadata = {"items": ["a"], "nested": {"k": [1]}}
        checkpoint, blobs = make_checkpoint(metadata=metadata)
        expected = decode_checkpoint(encode_checkpoint(checkpoint))
        store.save(checkpoint, blobs)
        _scribble(metadata)
        _scribble_checkpoint(checkpoint)
        blobs.clear()
        assert store.load(checkpoint.id) == expected

    def test_two_loads_independent(self, store: CheckpointStore) -> None:
        """Two loads of one record are equal but share no container."""
        original = _save(store, metadata=_RICH_METADATA)
        a, b = store.load(original.id), store.load(original.id)
        assert a == b
        assert a is not b
        assert a.metadata is not b.metadata
        assert a.metadata["nested"] is not b.metadata["nested"]
        assert a.metadata["nested"]["list"] is not b.metadata["nested"]["list"]
        assert a.executors is not b.executors

    # --- queries -------------------------------------------------------------------

    def test_list_order_and_filters(self, store: CheckpointStore) -> None:
        """list() is oldest-first by id whatever the save order, and every filter applies."""
        kinds = list(CheckpointKind)
        made = [
            make_checkpoint(workflow=f"wf-{i % 2}", session=f"s-{i % 3}", kind=kinds[i % 4])
            for i in range(12)
        ]
        shuffled = list(made)
        random.Random(7).shuffle(shuffled)
        for checkpoint, blobs in shuffled:
            store.save(checkpoint, blobs)
        ids = [cp.id for cp, _ in made]
        assert [cp.id for cp in store.list()] == ids
        for workflow in ("wf-0", "wf-1", "wf-9"):
            for session in ("s-0", "s-2", None):
                for kind in (CheckpointKind.STEP, None):
                    expected = [
                        cp.id
                        for cp, _ in made
                        if cp.workflow == workflow
                        and (session is None or cp.session == session)
                        and (kind is None or cp.kind == kind)
                    ]
                    got = store.list(workflow=workflow, session=session, kind=kind)
                    assert [cp.id for cp in got] == expected

    def test_latest_none_when_empty(self, store: CheckpointStore) -> None:
        """latest() on an empty store, or with no match, is None."""
        assert store.latest() is None
        _save(store, session="s", workflow="w")
        assert store.latest(session="other") is None
        assert store.latest(workflow="other") is None

    def test_latest_is_newest_match(self, store: CheckpointStore) -> None:
        """latest() returns the highest-id record matching the filters."""
        a1 = _save(store, session="a", workflow="w1")
        b1 = _save(store, session="b", workflow="w2")
        a2 = _save(store, session="a", parent=a1, workflow="w2")
        assert store.latest() == a2
        assert store.latest(session="b") == b1
        assert store.latest(session="a", workflow="w1") == a1
        assert store.latest(workflow="w2") == a2

    def test_sessions_sorted_and_unique(self, store: CheckpointStore) -> None:
        """sessions() lists each session with a record once, sorted."""
        assert store.sessions() == []
        for session in ("zeta", "alpha", "zeta", "mid"):
            _save(store, session=session)
        assert store.sessions() == ["alpha", "mid", "zeta"]

    def test_missing_id_raises_not_found(self, store: CheckpointStore) -> None:
        """Unknown ids and digests raise CheckpointNotFound, even odd-looking ones."""
        _save(store)
        for bad in (new_checkpoint_id(), "nope", "../../etc/passwd", ""):
            with pytest.raises(CheckpointNotFound):
                store.load(bad)
            with pytest.raises(CheckpointNotFound):
                store.history(bad)
            with pytest.raises(CheckpointNotFound):
                store.delete(bad)
        with pytest.raises(CheckpointNotFound):
            store.load_blob(blob_digest(b"never stored"))
        with pytest.raises(CheckpointNotFound):
            store.load_blob("../x")

    def test_history_follows_parents(self, store: CheckpointStore) -> None:
        """history() walks parent ids newest first and stops where the lineage was pruned."""
        chain = [_save(store, session="s")]
        for _ in range(3):
            chain.append(_save(store, session="s", parent=chain[-1]))
        _save(store, session="other")
        assert store.history(chain[3].id) == chain[::-1]
        assert store.history(chain[1].id) == [chain[1], chain[0]]
        assert store.prune("s", 2) == 2
        assert store.history(chain[3].id) == [chain[3], chain[2]]
        assert store.verify() == []

    # --- saving --------------------------------------------------------------------

    def test_save_existing_id_raises(self, store: CheckpointStore) -> None:
        """A second save of an id fails and leaves the first record as it was."""
        original = _save(store, metadata={"v": 1})
        clash_digest = blob_digest(b"clash")
        clash = dataclasses.replace(original, metadata={"v": 2}, executors={"e": (clash_digest,)})
        with pytest.raises(CheckpointError):
            store.save(clash, {clash_digest: b"clash"})
        assert store.load(original.id) == original
        assert store.has_blobs([clash_digest]) == set()

    def test_save_refuses_dangling_blob_reference(self, store: CheckpointStore) -> None:
        """A record naming a blob that is neither given nor stored is refused, atomically."""
        checkpoint, blobs = make_checkpoint(chunks={"e": [b"given", b"withheld"]})
        withheld = blob_digest(b"withheld")
        del blobs[withheld]
        with pytest.raises(CheckpointCorrupt, match=withheld):
            store.save(checkpoint, blobs)
        assert store.list() == []
        assert store.has_blobs([blob_digest(b"given"), withheld]) == set()
        with pytest.raises(CheckpointNotFound):
            store.load(checkpoint.id)

    def test_save_refuses_blob_with_wrong_digest(self, store: CheckpointStore) -> None:
        """A blob whose bytes do not hash to its key is refused and nothing is stored."""
        checkpoint, _ = make_checkpoint(chunks={"e": [b"right"]})
        digest = blob_digest(b"right")
        with pytest.raises(CheckpointCorrupt):
            store.save(checkpoint, {digest: b"wrong"})
        assert store.list() == []
        assert store.has_blobs([digest]) == set()

    def test_save_skips_blobs_already_stored(self, store: CheckpointStore) -> None:
        """A record may reference stored blobs without passing them again."""
        first = _save(store, chunks={"e": [b"chunk"]})
        second, _ = make_checkpoint(parent=first, chunks={"e": [b"chunk"]})
        store.save(second, {})
        assert store.load(second.id) == second
        assert store.load_blob(blob_digest(b"chunk")) == b"chunk"

    def test_save_ignores_unreferenced_blobs(self, store: CheckpointStore) -> None:
        """Blobs the record does not reference are not stored: no orphan from day one."""
        checkpoint, blobs = make_checkpoint()
        stray = blob_digest(b"stray")
        store.save(checkpoint, {**blobs, stray: b"stray"})
        assert store.has_blobs([stray, *blobs]) == set(blobs)

    def test_64mb_blob_roundtrip(self, store: CheckpointStore) -> None:
        """A 64 MiB snapshot chunk is stored, verified, returned whole and collected."""
        big = os.urandom(1 << 20) * 64
        digest = blob_digest(big)
        checkpoint = _save(store, chunks={"big": [big]})
        loaded = store.load_blob(digest)
        assert len(loaded) == len(big)
        assert blob_digest(loaded) == digest
        del loaded
        store.delete(checkpoint.id)
        assert store.has_blobs([digest]) == set()

    # --- retention -----------------------------------------------------------------

    def test_has_blobs(self, store: CheckpointStore) -> None:
        """has_blobs() returns exactly the stored subset and tolerates any string."""
        _save(store, chunks={"e": [b"x", b"y"]})
        x, y, z = (blob_digest(v) for v in (b"x", b"y", b"z"))
        assert store.has_blobs([x, z, "", "../etc", y]) == {x, y}
        assert store.has_blobs([]) == set()

    def test_delete(self, store: CheckpointStore) -> None:
        """delete() removes one record and the blobs only it used, nothing else."""
        a = _save(store, session="s", chunks={"e": [b"shared", b"a-only"]})
        b = _save(store, session="s", parent=a, chunks={"e": [b"shared", b"b-only"]})
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
        a = _save(store, session="a", chunks={"e": [b"common"]})
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
            lineage.append(_save(store, session="s", parent=parent, chunks=chunks))
        other = _save(store, session="t", chunks={"e": [b"own-0"]})
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

    def test_prune_rejects_negative_keep(self, store: CheckpointStore) -> None:
        """prune() with a negative keep raises ValueError and deletes nothing."""
        checkpoint = _save(store, session="s")
        with pytest.raises(ValueError, match="keep"):
            store.prune("s", -1)
        assert store.list() == [checkpoint]

    def test_gc_racing_saves_orphans_nothing(self, store: CheckpointStore) -> None:
        """Deletes collecting a blob never strand a concurrent save that reuses it."""
        shared = b"contended"
        barrier = threading.Barrier(2, timeout=_WAIT_S)

        def keep() -> None:
            barrier.wait()
            parent = None
            for _ in range(30):
                parent = _save(store, session="keep", parent=parent, chunks={"e": [shared]})

        def churn() -> None:
            barrier.wait()
            for _ in range(30):
                store.delete(_save(store, session="churn", chunks={"e": [shared]}).id)

        with ThreadPoolExecutor(2) as pool:
            for future in [pool.submit(keep), pool.submit(churn)]:
                future.result(timeout=_WAIT_S)
        assert len(store.list(session="keep")) == 30
        assert store.load_blob(blob_digest(shared)) == shared
        assert store.verify() == []

    # --- concurrency and handles -----------------------------------------------------

    def test_concurrent_threads_lose_nothing(self, store: CheckpointStore) -> None:
        """Eight threads saving lineages that share a blob lose and damage nothing."""
        threads, count = 8, 10
        barrier = threading.Barrier(threads, timeout=_WAIT_S)

        def lineage(n: int) -> list[Checkpoint]:
            barrier.wait()
            saved: list[Checkpoint] = []
            for i in range(count):
                chunks = {"shared": [b"shared"], "own": [f"{n}/{i}".encode()]}
                parent = saved[-1] if saved else None
                saved.append(_save(store, session=f"t{n}", parent=parent, chunks=chunks))
            return saved

        with ThreadPoolExecutor(threads) as pool:
            futures = [pool.submit(lineage, n) for n in range(threads)]
            lineages = [f.result(timeout=_WAIT_S) for f in futures]
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
                target=_save_lineage_in_child,
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
        reports: list[tuple[str, str | None]] = []
        deadline = time.monotonic() + _WAIT_S
        try:
            while len(reports) < processes and time.monotonic() < deadline:
                try:
                    reports.append(results.get(timeout=0.5))
                except queue.Empty:
                    # A child that died before reporting (e.g. it could not import
                    # the factory) must fail the test now, not at the deadline.
                    if not any(c.is_alive() for c in children):
                        break
        finally:
            for child in children:
                child.join(timeout=_WAIT_S)
                if child.is_alive():
                    child.kill()
                    child.join(timeout=_WAIT_S)
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
        """A second store from the factory reads and writes the same data."""
        first = _save(store)
        other = store_factory()
        try:
            assert other.load(first.id) == first
            second = _save(other, parent=first)
            assert store.load(second.id) == second
        finally:
            other.close()

    def test_data_survives_close_and_reopen(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """Everything saved is there after close() and a fresh open (durable stores)."""
        if not getattr(store_factory, "durable", False):
            pytest.skip(f"{type(store_factory).__name__} is not durable")
        saved = [_save(store, chunks={"e": [b"kept"]})]
        saved.append(_save(store, parent=saved[0], metadata=_RICH_METADATA))
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
        corrupt_record = _hook(store_factory, "corrupt_record")
        checkpoint = _save(store)
        corrupt_record(checkpoint.id, _truncate)
        for read in (lambda: store.load(checkpoint.id), store.list, store.latest):
            with pytest.raises(CheckpointCorrupt):
                read()

    def test_bitflipped_record_raises_corrupt(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """One flipped bit at the start, middle or end of a record is detected."""
        corrupt_record = _hook(store_factory, "corrupt_record")
        for position in (0, 40, 150, -1):
            checkpoint = _save(store, metadata=_RICH_METADATA)
            corrupt_record(checkpoint.id, _flip(position))
            with pytest.raises(CheckpointCorrupt):
                store.load(checkpoint.id)
            store.delete(checkpoint.id)

    def test_corrupt_blob_raises_corrupt(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A flipped or truncated blob raises CheckpointCorrupt naming its digest."""
        corrupt_blob = _hook(store_factory, "corrupt_blob")
        _save(store, chunks={"e": [b"flip me", b"cut me short"]})
        for value, mutate in ((b"flip me", _flip(3)), (b"cut me short", _truncate)):
            digest = blob_digest(value)
            corrupt_blob(digest, mutate)
            with pytest.raises(CheckpointCorrupt, match=digest):
                store.load_blob(digest)

    def test_latest_does_not_skip_corrupt(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A damaged newest record makes latest() raise, never fall back to an older one."""
        corrupt_record = _hook(store_factory, "corrupt_record")
        older = _save(store, session="s")
        newest = _save(store, session="s", parent=older)
        corrupt_record(newest.id, _flip(-1))
        with pytest.raises(CheckpointCorrupt):
            store.latest()
        with pytest.raises(CheckpointCorrupt):
            store.latest(session="s")
        assert store.load(older.id) == older

    def test_corrupt_record_can_be_deleted(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A damaged record can be deleted, after which the store is healthy again."""
        corrupt_record = _hook(store_factory, "corrupt_record")
        kept = _save(store)
        damaged = _save(store)
        corrupt_record(damaged.id, _truncate)
        store.delete(damaged.id)
        assert store.list() == [kept]
        assert store.verify() == []

    def test_verify_reports_problems(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """verify() names a damaged record and a damaged blob."""
        corrupt_record = _hook(store_factory, "corrupt_record")
        corrupt_blob = _hook(store_factory, "corrupt_blob")
        healthy = _save(store)
        damaged = _save(store)
        uses_bad_blob = _save(store, chunks={"e": [b"soon damaged"]})
        assert store.verify() == []
        corrupt_record(damaged.id, _flip(-1))
        corrupt_blob(blob_digest(b"soon damaged"), _flip(0))
        problems = store.verify()
        assert any(damaged.id in p for p in problems)
        assert any(blob_digest(b"soon damaged") in p for p in problems)
        assert any(uses_bad_blob.id in p for p in problems)
        assert not any(healthy.id in p for p in problems)

    def test_verify_reports_parent_never_stored(self, store: CheckpointStore) -> None:
        """A parent id that was never stored is a problem; a deleted parent is not."""
        ghost, _ = make_checkpoint()
        orphan = _save(store, parent=ghost)
        parent = _save(store)
        child = _save(store, parent=parent)
        store.delete(parent.id)
        problems = store.verify()
        assert len(problems) == 1
        assert orphan.id in problems[0]
        assert ghost.id in problems[0]
        assert store.history(child.id) == [child]
