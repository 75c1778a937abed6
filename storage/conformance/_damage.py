"""Conformance kit, part four: saves racing prunes, writers killed mid-save, damaged headers
and rows.

Private: the public front is ``actorflow.storage.conformance``. Requires pytest.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from actorflow.errors import ActorflowError, CheckpointCorrupt, CheckpointError
from actorflow.storage._format import Checkpoint, blob_digest
from actorflow.storage._protocol import CheckpointStore

from ._base import (
    RICH_METADATA,
    WAIT_S,
    KitBase,
    StoreFactory,
    child_processes,
    damage_hook,
    flip,
    join_children,
    make_checkpoint,
    save_new,
    truncate,
)
from ._factories import Mutation

_WRITERS, _SAVES = 6, 10


def _chunks(session: str, i: int) -> dict[str, list[bytes]]:
    """Blobs shared by every writer, by pairs of saves, and one of the save's own."""
    return {
        "shared": [b"shared"],
        "pair": [f"pair/{i // 2}".encode()],
        "own": [f"{session}/{i}".encode()],
    }


def _all_digests(sessions: list[str]) -> set[str]:
    found = {blob_digest(b"shared")}
    for session in sessions:
        for i in range(_SAVES):
            found |= {blob_digest(c) for cs in _chunks(session, i).values() for c in cs}
    return found


def _check_after_race(store: CheckpointStore, sessions: list[str]) -> None:
    """What must hold once saves and prunes stopped: nothing lost, leaked or dangling."""
    for session in sessions:
        store.prune(session, keep=2)
        kept = store.list(session=session)
        assert len(kept) == 2, f"session {session}: {[cp.id for cp in kept]}"
        latest = store.latest(session=session)
        assert latest == kept[-1]
        for cp in kept:
            for digest in cp.blob_digests():
                assert blob_digest(store.load_blob(digest)) == digest
    assert store.verify() == []
    for session in sessions:
        store.prune(session, keep=0)
    assert store.list() == []
    # Every reference count reached zero together with its last record: no blob leaked.
    assert store.has_blobs(_all_digests(sessions)) == set()
    assert store.verify() == []


def save_prune_child(
    *, factory: StoreFactory, role: str, sessions: list[str], barrier: Any, results: Any
) -> None:
    """Child-process body of the concurrent save/prune test (module level so a child process finds it)."""
    try:
        store = factory()
        try:
            barrier.wait(timeout=WAIT_S)
            if role == "prune":
                deadline = time.monotonic() + WAIT_S / 3
                done = 0
                while done < 40 and time.monotonic() < deadline:
                    for session in sessions:
                        store.prune(session, keep=2)
                    done += 1
            else:
                parent = None
                for i in range(_SAVES):
                    parent = save_new(store, session=role, parent=parent, chunks=_chunks(role, i))
        finally:
            store.close()
        results.put((role, None))
    except BaseException:
        results.put((role, traceback.format_exc()))
        raise


def save_until_killed(*, factory: StoreFactory, session: str, parent: Any, results: Any) -> None:
    """Child-process body of the crash test: saves with large fresh blobs until SIGKILLed.

    Reports ``("saving", None)`` before each save and ``("saved", id)`` after it.
    """
    store = factory()
    checkpoint = None if parent is None else store.load(parent)
    filler = os.urandom(1 << 20) * 4
    while True:
        chunk = os.urandom(16) + filler  # new bytes each time: the save writes all of them
        results.put(("saving", None))
        checkpoint = save_new(store, session=session, parent=checkpoint, chunks={"big": [chunk]})
        results.put(("saved", checkpoint.id))


def _reported_saves(results: Any) -> list[str]:
    """The ids of the "saved" reports a killed child's queue still holds."""
    saved: list[str] = []
    while True:
        try:
            event, checkpoint_id = results.get(timeout=0.2)
        except queue.Empty:
            return saved
        if event == "saved":
            saved.append(checkpoint_id)


# A row's id or session changed, as a stray UPDATE or a damaged page would: to another
# session, to empty or NULL-like text, to ids that sort before and after every id.
_COLUMN_DAMAGE = [
    ("session", "other"),
    ("session", ""),
    ("session", "null"),
    ("id", ""),
    ("id", "0"),
    ("id", "zzzz"),
    ("workflow", "other"),
    ("kind", "final"),
]


class DamageTests(KitBase):
    """Saves racing prunes and verify, crashes mid-save, damaged headers and rows."""

    def test_concurrent_saves_prunes_and_verify_threads(self, store: CheckpointStore) -> None:
        """Six threads save lineages sharing blobs while one prunes and one verifies:
        afterwards nothing is lost, dangling or leaked (blob reference counts stay exact)."""
        sessions = [f"t{n}" for n in range(_WRITERS)]
        stop = threading.Event()
        barrier = threading.Barrier(_WRITERS + 2, timeout=WAIT_S)

        def write(session: str) -> None:
            barrier.wait()
            parent: Checkpoint | None = None
            for i in range(_SAVES):
                parent = save_new(store, session=session, parent=parent, chunks=_chunks(session, i))

        def prune() -> int:
            barrier.wait()
            rounds = 0
            while not stop.is_set() or rounds == 0:
                for session in sessions:
                    store.prune(session, keep=2)
                rounds += 1
            return rounds

        def verify() -> None:
            barrier.wait()
            while not stop.is_set():
                problems = store.verify()  # may see a record pruned meanwhile: must not raise
                assert isinstance(problems, list)

        with ThreadPoolExecutor(_WRITERS + 2) as pool:
            writers = [pool.submit(write, s) for s in sessions]
            others: list[Future[Any]] = [pool.submit(prune), pool.submit(verify)]
            try:
                for future in writers:
                    future.result(timeout=WAIT_S)
            finally:
                stop.set()
            for future in others:
                future.result(timeout=WAIT_S)
        _check_after_race(store, sessions)

    def test_concurrent_saves_prunes_and_verify_processes(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """Three processes save, one prunes, this one verifies, all at once: nothing lost or leaked."""
        if not getattr(store_factory, "multiprocess", False):
            pytest.skip(f"{type(store_factory).__name__} is not shared across processes")
        sessions = ["p0", "p1", "p2"]
        ctx = child_processes()
        barrier = ctx.Barrier(len(sessions) + 1)
        results = ctx.Queue()
        children = [
            ctx.Process(
                target=save_prune_child,
                kwargs={
                    "factory": store_factory,
                    "role": role,
                    "sessions": sessions,
                    "barrier": barrier,
                    "results": results,
                },
            )
            for role in [*sessions, "prune"]
        ]
        for child in children:
            child.start()
        try:
            while any(c.is_alive() for c in children):
                assert isinstance(store.verify(), list)
        finally:
            reports = join_children(children, results, len(children))
            results.close()
            results.join_thread()
        assert [r for r in reports if r[1] is not None] == []
        assert [c.exitcode for c in children] == [0] * len(children)
        _check_after_race(store, sessions)

    def test_writer_killed_mid_save_leaves_the_previous_cut(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A writer SIGKILLed while saving leaves a verifiable store whose latest is a whole
        cut (the last one it finished, or the one it was writing if that committed)."""
        if not (
            getattr(store_factory, "multiprocess", False)
            and getattr(store_factory, "durable", False)
        ):
            pytest.skip(
                f"{type(store_factory).__name__} is not durable and shared across processes"
            )
        ctx = child_processes()
        parent: str | None = None
        # The kill lands at a different point of a save each round: at once, or a few
        # milliseconds in (while a 4 MB blob is hashed, written or made durable). The
        # delays place the fault; nothing waits on them for a result.
        for delay in (0.0, 0.004, 0.012, 0.03):
            results = ctx.Queue()
            child = ctx.Process(
                target=save_until_killed,
                kwargs={
                    "factory": store_factory,
                    "session": "crash",
                    "parent": parent,
                    "results": results,
                },
            )
            child.start()
            finished: list[str] = []
            while len(finished) < 2:
                event, checkpoint_id = results.get(timeout=WAIT_S)
                if event == "saved":
                    finished.append(checkpoint_id)
            while results.get(timeout=WAIT_S)[0] != "saving":
                pass
            time.sleep(delay)
            os.kill(child.pid or 0, signal.SIGKILL)
            child.join(timeout=WAIT_S)
            # Saves the child finished while the kill was on its way count too (a slow
            # machine can stretch the delay over several saves).
            finished += _reported_saves(results)
            results.close()
            results.join_thread()
            reopened = store_factory()
            try:
                assert reopened.verify() == []
                latest = reopened.latest(session="crash")
                assert latest is not None
                history = reopened.history(latest.id)
                # Nothing finished is lost: the last save reported done is on the lineage
                # (the save the kill interrupted may or may not have committed, whole).
                assert finished[-1] in [cp.id for cp in history], (finished, latest.id)
                for cp in history:
                    for digest in cp.blob_digests():
                        reopened.load_blob(digest)
                parent = latest.id
            finally:
                reopened.close()
        assert store.latest(session="crash") is not None

    def test_damaged_header_is_reported(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """Bit flips in the store's header: every read gives the right answer or raises a
        CheckpointError at once (no other exception, no stall, never an older latest)."""
        corrupt_header: Callable[[Mutation], None] | None = getattr(
            store_factory, "corrupt_header", None
        )
        if corrupt_header is None:
            pytest.skip(f"{type(store_factory).__name__} has no corrupt_header() hook")
        saved = [save_new(store, session="h")]
        saved.append(save_new(store, session="h", parent=saved[0]))
        store.close()
        for position in (0, 9, 13, 18, 21, 47, 56, 60):
            corrupt_header(flip(position))
            _reads_are_right_or_refused(store_factory, saved)

    @pytest.mark.parametrize(("column", "value"), _COLUMN_DAMAGE)
    def test_a_row_disagreeing_with_its_record_is_never_skipped(
        self, store: CheckpointStore, store_factory: StoreFactory, column: str, value: str
    ) -> None:
        """The newest record's id, session, workflow or kind column changed (the record
        still names its own): latest, list and load of the row raise CheckpointCorrupt
        naming the record, never an older record or a shorter list; verify reports it;
        deleting the row leaves a healthy store."""
        corrupt_column: Callable[[str, str, str], None] | None = getattr(
            store_factory, "corrupt_column", None
        )
        if corrupt_column is None:
            pytest.skip(f"{type(store_factory).__name__} has no corrupt_column() hook")
        other = save_new(store, session="other-lineage")
        older = save_new(store, session="s")
        newest = save_new(store, session="s", parent=older)
        corrupt_column(newest.id, column, value)
        row = value if column == "id" else newest.id
        reads: list[tuple[str, Callable[[], object]]] = [
            ("latest(session=...)", lambda: store.latest(session="s")),
            ("latest()", store.latest),
            ("list(session=...)", lambda: store.list(session="s")),
            ("list()", store.list),
            ("load() of the row", lambda: store.load(row)),
        ]
        for name, read in reads:
            try:
                got = read()
            except CheckpointCorrupt as exc:
                why = str(exc)
            else:
                pytest.fail(f"{name} gave {got!r} from a store whose newest row is damaged")
            assert newest.id in why, f"{name} did not name the damaged record: {why}"
        problems = store.verify()
        assert any(newest.id in p for p in problems), problems
        assert store.load(older.id) == older
        store.delete(row)
        assert store.latest(session="s") == older
        assert store.list() == [other, older]
        assert store.verify() == []

    @pytest.mark.parametrize(("column", "value"), [("session", "other"), ("id", "0")])
    def test_a_damaged_row_inside_a_lineage_is_never_left_out_of_a_list(
        self, store: CheckpointStore, store_factory: StoreFactory, column: str, value: str
    ) -> None:
        """A record between two others of its session gets another session or id in its
        row: latest still gives the newest, list of the session raises naming it."""
        corrupt_column: Callable[[str, str, str], None] | None = getattr(
            store_factory, "corrupt_column", None
        )
        if corrupt_column is None:
            pytest.skip(f"{type(store_factory).__name__} has no corrupt_column() hook")
        first = save_new(store, session="s")
        middle = save_new(store, session="s", parent=first)
        newest = save_new(store, session="s", parent=middle)
        corrupt_column(middle.id, column, value)
        assert store.latest(session="s") == newest
        with pytest.raises(CheckpointCorrupt, match=middle.id):
            store.list(session="s")
        assert any(middle.id in p for p in store.verify())

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


def _reads_are_right_or_refused(factory: StoreFactory, saved: list[Checkpoint]) -> None:
    try:
        store = factory()
    except CheckpointError:
        return
    try:
        reads: list[tuple[Callable[[], object], object]] = [
            (lambda: store.latest(session="h"), saved[-1]),
            (lambda: store.load(saved[0].id), saved[0]),
            (lambda: store.list(session="h"), saved),
        ]
        for read, expected in reads:
            try:
                got = read()
            except CheckpointError:
                continue
            except ActorflowError as exc:  # pragma: no cover - reported as the failure
                pytest.fail(
                    f"a damaged header raised {type(exc).__name__}, not a CheckpointError: {exc}"
                )
            assert got == expected, f"a damaged header gave {got!r}, not {expected!r}"
        problems = store.verify()
        assert isinstance(problems, list)
    finally:
        store.close()
