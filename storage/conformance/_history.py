"""Conformance kit, the session history: entries stored with their cuts, crashes included.

Private: the public front is ``actorflow.storage.conformance``. Requires pytest.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from typing import Any

import pytest

from actorflow.errors import CheckpointCorrupt, CheckpointError, LeaseLost
from actorflow.storage._format import Checkpoint, CheckpointKind
from actorflow.storage._history import HistoryEntry
from actorflow.storage._protocol import CheckpointStore

from ._base import (
    WAIT_S,
    KitBase,
    StoreFactory,
    child_processes,
    damage_hook,
    entry_data,
    flip,
    make_checkpoint,
    save_new,
)

ENTRIES_PER_RECORD = 3


def seqs(entries: list[HistoryEntry]) -> list[int]:
    """The sequence numbers of ``entries``, in their order."""
    return [entry.seq for entry in entries]


def save_history_until_killed(*, factory: StoreFactory, session: str) -> None:
    """Child-process body of the crash test: a lineage whose records carry consecutive
    entries, saved until the parent kills the process (module level so a child process finds it)."""
    store = factory()
    parent: Checkpoint | None = None
    seq = 0
    while True:
        history = range(seq, seq + ENTRIES_PER_RECORD)
        parent = save_new(store, session=session, parent=parent, history=history)
        seq += ENTRIES_PER_RECORD


class HistoryTests(KitBase):
    """A session's history entries travel inside its records: stored, read and removed
    with them, atomically, whatever happens to the writer."""

    def test_session_history_round_trip(self, store: CheckpointStore) -> None:
        """Entries come back in seq order, equal to what was saved, each naming its
        record; ``since`` starts the list at a seq; records without entries add none;
        another session's entries never appear."""
        first = save_new(store, session="s", history=[0, 1])
        bare = save_new(store, session="s", parent=first)
        last = save_new(store, session="s", parent=bare, history=[2, 3, 4])
        save_new(store, session="other", history=[0, 1, 2])
        history = store.session_history("s")
        assert history == [*first.history, *last.history]
        assert seqs(history) == [0, 1, 2, 3, 4]
        assert [e.checkpoint_id for e in history] == [first.id] * 2 + [last.id] * 3
        assert [e.data for e in history] == [entry_data("s", n) for n in range(5)]
        assert seqs(store.session_history("s", since=3)) == [3, 4]
        assert store.session_history("s", since=5) == []
        assert store.session_history("nobody") == []
        assert store.load(last.id).history == last.history

    def test_session_history_spans_every_lineage_of_the_session(
        self, store: CheckpointStore
    ) -> None:
        """A fork inside the session (resumed from an older cut) and a reset (a new
        lineage) keep the session's numbering: the history holds every lineage's entries,
        ordered by seq, not by lineage."""
        root = save_new(store, session="s", history=[0])
        save_new(store, session="s", parent=root, history=[1, 2])
        fork = save_new(store, session="s", parent=root, history=[3])
        save_new(store, session="s", history=[4, 5])  # a reset: no parent
        save_new(store, session="s", parent=fork, history=[6])
        assert seqs(store.session_history("s")) == list(range(7))

    def test_history_goes_with_its_records(self, store: CheckpointStore) -> None:
        """delete, prune and prune_older_than remove a record's entries with it."""
        now = time.time()
        old, blobs = make_checkpoint(session="s", history=[0, 1])
        store.save(dataclasses.replace(old, created_at=now - 10_000), blobs)
        middle = save_new(store, session="s", parent=old, history=[2])
        part = save_new(store, session="s", parent=middle, kind=CheckpointKind.PARTIAL)
        newest = save_new(store, session="s", parent=middle, history=[3, 4])
        assert store.prune_older_than(now - 5_000) == 1
        assert seqs(store.session_history("s")) == [2, 3, 4]
        store.delete(part.id)
        assert store.prune("s", keep=1) == 1
        assert store.session_history("s") == list(newest.history)
        store.delete(newest.id)
        assert store.session_history("s") == []

    def test_refused_saves_leave_no_history(self, store: CheckpointStore) -> None:
        """A save that is refused (a dangling blob, an id already stored, a stale lease)
        stores none of its entries."""
        kept = save_new(store, session="s", history=[0])
        dangling, _ = make_checkpoint(session="s", parent=kept, history=[1])
        with pytest.raises(CheckpointCorrupt):
            store.save(dangling, {})
        again, blobs = make_checkpoint(session="s", parent=kept, history=[1])
        with pytest.raises(CheckpointError):
            store.save(dataclasses.replace(again, id=kept.id, history=()), blobs)
        stale = store.acquire_lease("s", "first", 30.0)
        store.release_lease(stale)
        store.acquire_lease("s", "second", 30.0)
        fenced, blobs = make_checkpoint(session="s", parent=kept, history=[1])
        with pytest.raises(LeaseLost):
            store.save(fenced, blobs, lease=stale)
        assert store.session_history("s") == list(kept.history)

    def test_history_survives_reopen(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """Durable stores keep the entries across close() and a fresh open."""
        if not getattr(store_factory, "durable", False):
            pytest.skip(f"{type(store_factory).__name__} is not durable")
        first = save_new(store, session="s", history=[0, 1])
        second = save_new(store, session="s", parent=first, history=[2])
        store.close()
        reopened = store_factory()
        try:
            assert reopened.session_history("s") == [*first.history, *second.history]
        finally:
            reopened.close()

    def test_a_damaged_record_fails_the_history_it_belongs_to(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A record of the session that cannot be decoded makes session_history raise
        CheckpointCorrupt: its entries are never silently left out."""
        corrupt_record = damage_hook(store_factory, "corrupt_record")
        first = save_new(store, session="s", history=[0])
        damaged = save_new(store, session="s", parent=first, history=[1])
        corrupt_record(damaged.id, flip(-40))
        with pytest.raises(CheckpointCorrupt):
            store.session_history("s")

    def test_a_killed_writer_leaves_whole_records_and_their_entries(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A process SIGKILLed while it saves records with entries: afterwards the
        history is exactly the entries of the records stored, each record's entries
        whole, and their seqs a gapless prefix (what a resumed run continues from)."""
        if not getattr(store_factory, "multiprocess", False):
            pytest.skip(f"{type(store_factory).__name__} is not shared between processes")
        ctx = child_processes()
        for round_ in range(2):
            session = f"killed-{round_}"
            child = ctx.Process(
                target=save_history_until_killed,
                kwargs={"factory": store_factory, "session": session},
            )
            child.start()
            try:
                deadline = time.monotonic() + WAIT_S
                wanted = 3 + 4 * round_  # kill it at another point in each round
                while len(store.list(session=session)) < wanted:
                    assert time.monotonic() < deadline, "the child saved nothing in time"
                    assert child.is_alive(), f"the child died first: {child.exitcode}"
                    time.sleep(0.005)  # polls another process's progress, bounded above
            finally:
                if child.pid is not None:
                    os.kill(child.pid, signal.SIGKILL)
                child.join(WAIT_S)
            assert child.exitcode == -signal.SIGKILL
            reopened = store_factory()
            try:
                records = reopened.list(session=session)
                history = reopened.session_history(session)
                stored: list[Any] = [e for r in records for e in r.history]
                assert history == sorted(stored, key=lambda e: e.seq)
                assert seqs(history) == list(range(len(history)))
                assert len(history) == ENTRIES_PER_RECORD * len(records)
                assert reopened.verify() == []
            finally:
                reopened.close()
