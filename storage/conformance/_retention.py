"""Conformance kit, retention by age: ``prune_older_than`` on every store.

Private: the public front is ``actorflow.storage.conformance``. Requires pytest.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from actorflow.storage._format import Checkpoint, CheckpointKind, blob_digest
from actorflow.storage._protocol import CheckpointStore

from ._base import (
    WAIT_S,
    KitBase,
    make_checkpoint,
    save_new,
)
from ._leases import LONG_TTL, SHORT_TTL, leased, wait_until_free

DAY = 86_400.0


def save_aged(
    store: CheckpointStore,
    age: float,
    *,
    now: float,
    parent: Checkpoint | None = None,
    **kwargs: Any,
) -> Checkpoint:
    """Save a record whose ``created_at`` is ``age`` seconds before ``now``."""
    checkpoint, blobs = make_checkpoint(parent=parent, **kwargs)
    checkpoint = dataclasses.replace(checkpoint, created_at=now - age)
    store.save(checkpoint, blobs)
    return checkpoint


class RetentionTests(KitBase):
    """Removal by age never drops what a resume needs and never orphans a blob."""

    def test_prune_older_than_keeps_each_sessions_newest_cut(self, store: CheckpointStore) -> None:
        """Cuts older than the cut-off go, except each session's newest cut; shared blobs stay."""
        now = time.time()
        chunks = {"e": [b"everywhere"]}
        s0 = save_aged(store, 10 * DAY, now=now, session="s", chunks={"e": [b"s0"]})
        s0p = save_aged(
            store, 10 * DAY, now=now, session="s", parent=s0, kind=CheckpointKind.PARTIAL
        )
        s1 = save_aged(store, 9 * DAY, now=now, session="s", parent=s0, chunks=chunks)
        s2 = save_aged(store, 1 * DAY, now=now, session="s", parent=s1, chunks={"e": [b"s2"]})
        o0 = save_aged(store, 20 * DAY, now=now, session="old", chunks={"e": [b"o0"]})
        o1 = save_aged(store, 8 * DAY, now=now, session="old", parent=o0, chunks=chunks)
        assert store.prune_older_than(now - 7 * DAY) == 4
        assert store.list(session="s") == [s2]
        assert store.list(session="old") == [o1], "a session's newest cut stays, whatever its age"
        assert store.sessions() == ["old", "s"]
        digests = {v: blob_digest(v) for v in (b"s0", b"s2", b"o0", b"everywhere")}
        assert store.has_blobs(digests.values()) == {digests[b"s2"], digests[b"everywhere"]}
        assert store.history(s2.id) == [s2]
        assert s0p.id not in {cp.id for cp in store.list()}
        assert store.verify() == []
        assert store.prune_older_than(now - 7 * DAY) == 0

    def test_prune_older_than_whole_sessions(self, store: CheckpointStore) -> None:
        """With whole_sessions, sessions whose newest record is older go whole; others are untouched."""
        now = time.time()
        shared = {"e": [b"shared by both"]}
        a0 = save_aged(store, 30 * DAY, now=now, session="abandoned", chunks=shared)
        save_aged(store, 29 * DAY, now=now, session="abandoned", parent=a0, chunks={"e": [b"a1"]})
        l0 = save_aged(store, 30 * DAY, now=now, session="live", chunks=shared)
        l1 = save_aged(store, 1 * DAY, now=now, session="live", parent=l0)
        assert store.prune_older_than(now - 7 * DAY, whole_sessions=True) == 2
        assert store.sessions() == ["live"]
        assert store.list(session="live") == [l0, l1], "an active session keeps even old records"
        assert store.load_blob(blob_digest(b"shared by both")) == b"shared by both"
        assert store.has_blobs([blob_digest(b"a1")]) == set()
        assert store.verify() == []

    def test_prune_older_than_whole_sessions_spares_an_open_session(
        self, store: CheckpointStore
    ) -> None:
        """A session a live lease holds is open somewhere, however long it wrote nothing:
        whole_sessions leaves it whole until its lease is released or expires."""
        leased(store)
        now = time.time()
        waiting = save_aged(store, 30 * DAY, now=now, session="waiting")
        save_aged(store, 30 * DAY, now=now, session="abandoned")
        save_aged(store, 30 * DAY, now=now, session="crashed")
        lease = store.acquire_lease("waiting", "a worker", LONG_TTL)
        store.acquire_lease("crashed", "a dead worker", SHORT_TTL)
        wait_until_free(store, "crashed", SHORT_TTL + WAIT_S / 4)  # expired: no one holds it
        assert store.prune_older_than(now - 7 * DAY, whole_sessions=True) == 2
        assert store.sessions() == ["waiting"]
        assert store.list(session="waiting") == [waiting]
        store.release_lease(lease)
        assert store.prune_older_than(now - 7 * DAY, whole_sessions=True) == 1
        assert store.sessions() == []
        assert store.verify() == []

    def test_prune_older_than_thins_an_open_session(self, store: CheckpointStore) -> None:
        """Thinning keeps each session's newest cut, so it need not wait for a lease."""
        leased(store)
        now = time.time()
        first = save_aged(store, 30 * DAY, now=now, session="s")
        newest = save_aged(store, 20 * DAY, now=now, session="s", parent=first)
        store.acquire_lease("s", "a worker", LONG_TTL)
        assert store.prune_older_than(now - 7 * DAY) == 1
        assert store.list(session="s") == [newest]

    def test_prune_older_than_never_deletes_beneath_an_open(self, store: CheckpointStore) -> None:
        """An open (a lease, then a read) racing whole-session removal sees the session
        whole for as long as it holds the lease, or finds it gone: never records that
        vanish while it holds them."""
        leased(store)
        now = time.time()
        sessions = [f"idle-{n}" for n in range(24)]
        for session in sessions:
            save_aged(store, 30 * DAY, now=now, session=session, chunks={"e": [session.encode()]})
        barrier, opened_all = threading.Barrier(2, timeout=WAIT_S), threading.Event()

        def open_each() -> list[str]:
            barrier.wait()
            vanished: list[str] = []
            for session in sessions:
                lease = store.acquire_lease(session, "opener", LONG_TTL)
                head = store.latest(session=session)
                blob = blob_digest(session.encode())
                if head is not None:
                    listed, has = store.list(session=session), store.has_blobs([blob])
                    if listed != [head] or has != {blob}:
                        vanished.append(
                            f"{session}: head {head.id}, listed {[c.id for c in listed]}, "
                            f"blob stored {has == {blob}}"
                        )
                store.release_lease(lease)
            opened_all.set()
            return vanished

        def remove() -> int:
            barrier.wait()
            removed = 0
            while not opened_all.is_set():
                removed += store.prune_older_than(now - DAY, whole_sessions=True)
            return removed

        with ThreadPoolExecutor(2) as pool:
            opened, removing = pool.submit(open_each), pool.submit(remove)
            vanished = opened.result(timeout=WAIT_S)
            assert vanished == [], f"vanished beneath a lease: {vanished}"
            removed = removing.result(timeout=WAIT_S)
        assert removed + store.prune_older_than(now - DAY, whole_sessions=True) == len(sessions)
        assert store.sessions() == []

    def test_prune_older_than_partial_records_follow_their_cut(
        self, store: CheckpointStore
    ) -> None:
        """A partial record stays exactly when its parent cut does, whatever its own age."""
        now = time.time()
        early = save_aged(store, 10 * DAY, now=now, session="s")
        stale = save_aged(store, 1, now=now, session="s", parent=early, kind=CheckpointKind.PARTIAL)
        cut = save_aged(store, 9 * DAY, now=now, session="s", parent=early)
        parts = [
            save_aged(store, age, now=now, session="s", parent=cut, kind=CheckpointKind.PARTIAL)
            for age in (8 * DAY, 1)
        ]
        assert store.prune_older_than(now - DAY) == 2  # ``early`` and ``stale``
        assert store.list(session="s") == [cut, *parts]
        assert store.latest(session="s") == parts[-1]
        assert stale.id not in {cp.id for cp in store.list()}
        assert store.verify() == []

    def test_prune_older_than_cutoff_is_exclusive(self, store: CheckpointStore) -> None:
        """A record created exactly at the cut-off is kept; one created just before is not."""
        now = time.time()
        at = save_aged(store, 0, now=now - 5.0, session="s")
        before = save_aged(store, 0.5, now=now - 5.0, session="t")
        save_aged(store, 0, now=now, session="t", parent=before)
        assert store.prune_older_than(now - 5.0) == 1
        assert store.list(session="s") == [at]
        assert before.id not in {cp.id for cp in store.list()}

    @pytest.mark.parametrize("cutoff", [math.nan, math.inf, -math.inf, "7d", None, True])
    def test_prune_older_than_rejects_a_bad_cutoff(
        self, store: CheckpointStore, cutoff: Any
    ) -> None:
        """A cut-off that is not finite epoch seconds raises ValueError and deletes nothing."""
        now = time.time()
        kept = [save_aged(store, 30 * DAY, now=now, session="s")]
        kept.append(save_aged(store, 20 * DAY, now=now, session="s", parent=kept[0]))
        with pytest.raises(ValueError, match="epoch seconds"):
            store.prune_older_than(cutoff)
        with pytest.raises(ValueError, match="epoch seconds"):
            store.prune_older_than(cutoff, whole_sessions=True)
        assert store.list() == kept

    @pytest.mark.parametrize("session", [None, "", 7, "\udc80"])
    def test_a_session_argument_that_is_no_session_id_is_refused(
        self, store: CheckpointStore, session: Any
    ) -> None:
        """``prune(session, keep)`` and ``session_history(session)`` take one session's
        id: None (what ``list`` takes for "every session") or another non-id raises
        ValueError, and nothing of any session is deleted."""
        now = time.time()
        kept = [save_aged(store, 3 * DAY, now=now, session=name) for name in ("a", "b")]
        kept.append(save_aged(store, 2 * DAY, now=now, session="a", parent=kept[0]))
        with pytest.raises(ValueError, match="session"):
            store.prune(session, 1)
        with pytest.raises(ValueError, match="session"):
            store.session_history(session)
        assert sorted(cp.id for cp in store.list()) == sorted(cp.id for cp in kept)

    def test_prune_older_than_racing_saves_orphans_nothing(self, store: CheckpointStore) -> None:
        """Removal by age running beside saves that reuse its blobs never strands one of them."""
        shared = b"contended by age"
        now = time.time()
        barrier = threading.Barrier(2, timeout=WAIT_S)

        def keep() -> list[Checkpoint]:
            barrier.wait()
            saved: list[Checkpoint] = []
            for _ in range(20):
                parent = saved[-1] if saved else None
                saved.append(
                    save_aged(
                        store, 0, now=now, session="keep", parent=parent, chunks={"e": [shared]}
                    )
                )
            return saved

        def expire() -> int:
            barrier.wait()
            removed = 0
            for n in range(20):
                save_aged(store, 30 * DAY, now=now, session=f"old-{n}", chunks={"e": [shared]})
                removed += store.prune_older_than(now - DAY, whole_sessions=True)
            return removed

        with ThreadPoolExecutor(2) as pool:
            kept, removed = pool.submit(keep), pool.submit(expire)
            lineage = kept.result(timeout=WAIT_S)
            assert removed.result(timeout=WAIT_S) == 20
        assert store.list(session="keep") == lineage
        assert store.sessions() == ["keep"]
        assert store.load_blob(blob_digest(shared)) == shared
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
