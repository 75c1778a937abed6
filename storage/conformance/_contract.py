"""Conformance kit, part one: round trips, ownership, queries and saving.

Private: the public front is ``actorflow.storage.conformance``. Requires pytest.
"""

from __future__ import annotations

import dataclasses
import os
import random
from typing import Any

import pytest

from actorflow.errors import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    LeaseLost,
    SessionOwned,
)
from actorflow.storage._cut import Cut, packed_metadata
from actorflow.storage._fast_paths import SummarisesSessions, cut_saver, session_summaries
from actorflow.storage._format import (
    Checkpoint,
    CheckpointKind,
    blob_digest,
    decode_checkpoint,
    encode_checkpoint,
    new_checkpoint_id,
)
from actorflow.storage._protocol import CheckpointStore
from actorflow.storage._summary import summaries_by_listing

from ._base import (
    RICH_METADATA,
    KitBase,
    StoreFactory,
    make_checkpoint,
    save_new,
    scribble,
    scribble_checkpoint,
)


class ContractTests(KitBase):
    """What every single-threaded caller relies on."""

    # --- round trips and ownership ---------------------------------------------

    def test_is_a_checkpoint_store(self, store: CheckpointStore) -> None:
        """The store satisfies the CheckpointStore protocol, and each method behaves as
        one: the types it returns, its keyword filters, and what a save makes visible."""
        assert isinstance(store, CheckpointStore)
        assert store.list() == [] and store.sessions() == [] and store.verify() == []
        assert store.latest() is None
        first = save_new(store, session="s", workflow="w", chunks={"e": [b"one"]})
        loaded = store.load(first.id)
        assert type(loaded) is Checkpoint and loaded == first
        listed = store.list(workflow="w", session="s", kind=first.kind)
        assert type(listed) is list and listed == [first]
        assert store.latest(workflow="w", session="s") == first
        assert store.sessions() == ["s"] and type(store.sessions()[0]) is str
        digest = blob_digest(b"one")
        found = store.has_blobs([digest, "0" * 64])
        assert type(found) is set and found == {digest}
        assert type(store.load_blob(digest)) is bytes and store.load_blob(digest) == b"one"
        assert store.history(first.id) == [first]
        problems = store.verify()
        assert type(problems) is list and problems == []
        removed = store.prune("s", keep=0)
        assert type(removed) is int and removed == 1
        assert store.list() == [] and store.has_blobs([digest]) == set()

    def test_roundtrip_every_field(self, store: CheckpointStore) -> None:
        """Every field of every kind of record comes back equal and correctly typed."""
        first = save_new(store, kind=CheckpointKind.ENTRY, chunks={})
        saved = [first]
        for kind in (CheckpointKind.STEP, CheckpointKind.RESPONSE, CheckpointKind.FINAL):
            chunks = {"a": [b"a1", b"a2"], "b": [os.urandom(8)], "c": [b"a1"]}
            saved.append(
                save_new(
                    store,
                    parent=saved[-1],
                    kind=kind,
                    chunks=chunks,
                    metadata=RICH_METADATA,
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
        original = save_new(store, metadata=RICH_METADATA)
        scribble_checkpoint(store.load(original.id))
        assert store.load(original.id) == original

    def test_list_and_latest_return_callers_own_copies(self, store: CheckpointStore) -> None:
        """Records from list() and latest() are the caller's own too (MAF #7683)."""
        original = save_new(store, metadata=RICH_METADATA)
        for checkpoint in store.list():
            scribble_checkpoint(checkpoint)
        latest = store.latest()
        assert latest is not None
        scribble_checkpoint(latest)
        assert store.list() == [original]
        assert store.latest() == original
        assert store.history(original.id) == [original]

    def test_mutating_saved_object_after_save_changes_nothing(self, store: CheckpointStore) -> None:
        """What was saved is fixed at save(): later changes to the caller's objects do not leak."""
        metadata = {"items": ["a"], "nested": {"k": [1]}}
        checkpoint, blobs = make_checkpoint(metadata=metadata)
        expected = decode_checkpoint(encode_checkpoint(checkpoint))
        store.save(checkpoint, blobs)
        scribble(metadata)
        scribble_checkpoint(checkpoint)
        blobs.clear()
        assert store.load(checkpoint.id) == expected

    def test_two_loads_independent(self, store: CheckpointStore) -> None:
        """Two loads of one record are equal but share no container."""
        original = save_new(store, metadata=RICH_METADATA)
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
        with pytest.raises(ValueError, match="bogus"):  # not "no record of that kind"
            store.list(kind="bogus")  # type: ignore[arg-type]

    def test_latest_none_when_empty(self, store: CheckpointStore) -> None:
        """latest() on an empty store, or with no match, is None."""
        assert store.latest() is None
        save_new(store, session="s", workflow="w")
        assert store.latest(session="other") is None
        assert store.latest(workflow="other") is None

    def test_latest_is_newest_match(self, store: CheckpointStore) -> None:
        """latest() returns the highest-id record matching the filters."""
        a1 = save_new(store, session="a", workflow="w1")
        b1 = save_new(store, session="b", workflow="w2")
        a2 = save_new(store, session="a", parent=a1, workflow="w2")
        assert store.latest() == a2
        assert store.latest(session="b") == b1
        assert store.latest(session="a", workflow="w1") == a1
        assert store.latest(workflow="w2") == a2

    def test_sessions_sorted_and_unique(self, store: CheckpointStore) -> None:
        """sessions() lists each session with a record once, sorted."""
        assert store.sessions() == []
        for session in ("zeta", "alpha", "zeta", "mid"):
            save_new(store, session=session)
        assert store.sessions() == ["alpha", "mid", "zeta"]

    def test_missing_id_raises_not_found(self, store: CheckpointStore) -> None:
        """Unknown ids and digests raise CheckpointNotFound, even odd-looking ones."""
        save_new(store)
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
        chain = [save_new(store, session="s")]
        for _ in range(3):
            chain.append(save_new(store, session="s", parent=chain[-1]))
        save_new(store, session="other")
        assert store.history(chain[3].id) == chain[::-1]
        assert store.history(chain[1].id) == [chain[1], chain[0]]
        assert store.prune("s", 2) == 2
        assert store.history(chain[3].id) == [chain[3], chain[2]]
        assert store.verify() == []

    # --- saving --------------------------------------------------------------------

    def test_save_existing_id_raises(self, store: CheckpointStore) -> None:
        """A second save of an id fails and leaves the first record as it was."""
        original = save_new(store, metadata={"v": 1})
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
        first = save_new(store, chunks={"e": [b"chunk"]})
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
        checkpoint = save_new(store, chunks={"big": [big]})
        loaded = store.load_blob(digest)
        assert len(loaded) == len(big)
        assert blob_digest(loaded) == digest
        del loaded
        store.delete(checkpoint.id)
        assert store.has_blobs([digest]) == set()

    # --- the optional cut fast path (SavesCuts) ---------------------------------

    def test_session_summaries_equal_the_listing(self, store: CheckpointStore) -> None:
        """Every session summarised (``session_summaries``: the store's
        ``SummarisesSessions`` fast path when it offers one, else the listing) is what
        listing each session gives: its newest record of any kind (a partial one
        too), its record count and its first and last ``created_at``; sorted by
        session id as Python sorts text (a database collation may not: "B" before
        "a"), after a delete too; an empty store is summarised as nothing."""
        assert session_summaries(store) == [] and summaries_by_listing(store) == []
        first = save_new(store, session="b", kind=CheckpointKind.ENTRY)
        save_new(store, session="b", parent=first, kind=CheckpointKind.FINAL)
        lone = save_new(store, session="a", kind=CheckpointKind.HALT, history=[0, 1])
        cut = save_new(store, session="B-\u00e9", kind=CheckpointKind.ENTRY)
        partial = save_new(store, session="B-\u00e9", parent=cut, kind=CheckpointKind.PARTIAL)
        reset = save_new(store, session="b", kind=CheckpointKind.ENTRY)  # a second root
        expected = summaries_by_listing(store)
        assert [s.session for s in expected] == ["B-\u00e9", "a", "b"]
        assert [s.records for s in expected] == [2, 1, 3]
        assert [s.latest for s in expected] == [partial, lone, reset]
        assert expected[2].first_at == first.created_at
        assert expected[2].last_at == max(c.created_at for c in store.list(session="b"))
        summaries = session_summaries(store)
        assert summaries == expected
        assert summaries[1].latest.history == lone.history
        if isinstance(store, SummarisesSessions):
            assert store.session_summaries() == expected
        store.delete(reset.id)
        assert session_summaries(store) == summaries_by_listing(store)
        assert session_summaries(store)[2].records == 2

    def test_cut_fast_path_reads_as_save(self, store: CheckpointStore) -> None:
        """Cuts saved as the runtime saves them (``cut_saver``: the store's ``SavesCuts``
        fast path when it offers one, else ``save`` of ``cut.checkpoint()``) read back as
        ``save`` would: the same records and blobs, the same refusals (a dangling blob,
        an id saved twice, a blob that does not hash to its key), and the lease fencing
        of ``save``."""
        saves = cut_saver(store)
        first, blobs = make_checkpoint(session="cuts", metadata={"k": [1, "two"]}, history=[0])
        second, _ = make_checkpoint(session="cuts", parent=first, chunks={}, history=[1, 2])
        second = dataclasses.replace(second, executors=dict(first.executors))
        cuts = [as_cut(first), as_cut(second)]
        saves(cuts[0], blobs)
        saves(cuts[1], {})
        for cut, checkpoint in zip(cuts, (first, second), strict=True):
            assert encode_checkpoint(store.load(cut.id)) == encode_checkpoint(checkpoint)
        assert store.list(session="cuts") == [first, second]
        assert store.latest(session="cuts") == second
        assert store.history(second.id) == [second, first]
        assert store.session_history("cuts") == [*first.history, *second.history]
        assert store.load_blob(next(iter(blobs))) == next(iter(blobs.values()))
        assert store.verify() == []
        with pytest.raises(CheckpointError, match="already stored"):
            saves(cuts[1], {})
        orphan, orphan_blobs = make_checkpoint(session="cuts", parent=second)
        with pytest.raises(CheckpointCorrupt, match="neither given nor stored"):
            saves(as_cut(orphan), {})
        with pytest.raises(CheckpointCorrupt, match="hashes to"):
            saves(as_cut(orphan), dict.fromkeys(orphan_blobs, b"not the state"))
        with pytest.raises(CheckpointNotFound):
            store.load(orphan.id)
        lease = store.acquire_lease("cuts", "kit", 60.0)
        fenced, fenced_blobs = make_checkpoint(session="cuts", parent=second)
        with pytest.raises(SessionOwned):
            saves(as_cut(fenced), fenced_blobs)  # without the lease: refused
        cut_saver(store, lease)(as_cut(fenced), fenced_blobs)
        assert store.latest(session="cuts") == fenced
        store.release_lease(lease)
        stale, stale_blobs = make_checkpoint(session="cuts", parent=fenced)
        store.acquire_lease("cuts", "another", 60.0)
        with pytest.raises(LeaseLost):
            cut_saver(store, lease)(as_cut(stale), stale_blobs)

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

    @pytest.mark.parametrize("checkpoint_id", [None, 7, b"an-id", ["a-checkpoint-id"]])
    def test_a_checkpoint_argument_that_is_no_checkpoint_id_is_refused(
        self, store: CheckpointStore, checkpoint_id: Any
    ) -> None:
        """``load`` and ``delete`` take one checkpoint's id: anything else (a list of
        ids, say) raises TypeError saying so, and nothing is deleted."""
        kept = save_new(store, session="s")
        with pytest.raises(TypeError, match="one checkpoint id"):
            store.delete(checkpoint_id)
        with pytest.raises(TypeError, match="one checkpoint id"):
            store.load(checkpoint_id)
        assert store.list() == [kept]

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


def as_cut(checkpoint: Checkpoint) -> Cut:
    """``checkpoint`` as the runtime's cut of it (see ``actorflow.storage._cut``)."""
    return Cut(
        checkpoint.id,
        checkpoint.parent_id,
        checkpoint.session,
        checkpoint.workflow,
        checkpoint.graph_signature,
        checkpoint.superstep,
        checkpoint.kind.value,
        checkpoint.created_at,
        tuple((e, tuple(d)) for e, d in checkpoint.executors.items()),
        checkpoint.runtime,
        packed_metadata(checkpoint.metadata),
        tuple(entry.raw() for entry in checkpoint.history),
    )
