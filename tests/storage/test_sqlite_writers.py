"""One process's writers to a SQLite file take the write lock in turn.

SQLite's busy handler serves waiters in no order, so beside busy threads a lease
grant bounded by 1 s starved behind the process's own saves (``StoreLocked`` in
``test_store_sharing`` under load) and saves ran past their 30 s busy timeout.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import actorflow as af
from actorflow.storage.conformance import make_checkpoint
from actorflow.storage.sqlite._writers import WriterQueue, writer_queue
from tests.support.forks import in_child

BOUND = 10.0
"""Bound on every wait of these tests."""


def _until(condition: Callable[[], bool]) -> None:
    """Wait (bounded) until ``condition()`` holds."""
    deadline = time.monotonic() + BOUND
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        pause.wait(0.001)


def _queued(queue: WriterQueue) -> int:
    return len(queue._waiters)


def test_the_lock_passes_in_the_order_it_was_asked_for() -> None:
    queue = WriterQueue()
    assert queue.acquire(BOUND)
    order: list[int] = []

    def writer(i: int) -> None:
        assert queue.acquire(BOUND)
        order.append(i)
        queue.release()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(5)]
    for i, thread in enumerate(threads):
        thread.start()
        _until(lambda i=i: _queued(queue) == i + 1)  # type: ignore[misc]
    queue.release()
    for thread in threads:
        thread.join(BOUND)
    assert order == [0, 1, 2, 3, 4]
    assert queue.acquire(0.0)  # free again


def test_a_moving_queue_is_waited_out_past_the_bound() -> None:
    """Ten holders of 50 ms each: a waiter bounded by 0.2 s still gets its turn."""
    queue = WriterQueue()
    assert queue.acquire(BOUND)
    holders: list[threading.Thread] = []

    def holder() -> None:
        assert queue.acquire(BOUND)
        threading.Event().wait(0.05)  # a transaction's length, not a synchronisation
        queue.release()

    for n in range(10):
        holders.append(threading.Thread(target=holder))
        holders[-1].start()
        _until(lambda n=n: _queued(queue) == n + 1)  # type: ignore[misc]
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(queue.acquire(0.2)))
    waiter.start()
    _until(lambda: _queued(queue) == 11)
    started = time.monotonic()
    queue.release()
    waiter.join(BOUND)
    assert got == [True]
    assert time.monotonic() - started > 0.2
    queue.release()
    for thread in holders:
        thread.join(BOUND)


def test_a_holder_that_does_not_let_go_ends_the_wait_at_the_bound() -> None:
    queue = WriterQueue()
    assert queue.acquire(BOUND)
    started = time.monotonic()
    assert not queue.acquire(0.1)
    assert 0.1 <= time.monotonic() - started < BOUND
    queue.release()
    assert queue.acquire(0.0)  # the waiter that gave up took no turn


def test_a_waiter_interrupted_leaves_the_line() -> None:
    """Ctrl-C (here SIGUSR1) in a wait: the turn it queued is never handed the lock."""

    class Interrupted(Exception):
        pass

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    queue = WriterQueue()
    assert queue.acquire(BOUND)
    main = threading.get_ident()

    def kick() -> None:
        _until(lambda: _queued(queue) == 1)
        signal.pthread_kill(main, signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    kicker = threading.Thread(target=kick)
    try:
        kicker.start()
        with pytest.raises(Interrupted):
            queue.acquire(BOUND)
    finally:
        kicker.join(BOUND)
        signal.signal(signal.SIGUSR1, previous)
    assert _queued(queue) == 0
    queue.release()
    assert queue.acquire(0.0)  # free: no turn left in the line holds it


def test_stores_on_one_file_share_its_queue(tmp_path: Path) -> None:
    first = af.SQLiteStore(tmp_path / "s.db")
    second = af.SQLiteStore(tmp_path / "." / "s.db")
    try:
        first.save(*make_checkpoint(session="a"))
        assert writer_queue(tmp_path / "s.db") is writer_queue(tmp_path / "." / "s.db")
        second.save(*make_checkpoint(session="b"))
        assert first.sessions() == ["a", "b"]
    finally:
        first.close()
        second.close()


@pytest.mark.timeout(120)
def test_lease_grants_beside_busy_threads_are_not_starved_by_saves(tmp_path: Path) -> None:
    """8 threads saving in a loop and 4 busy threads: four grants bounded by 1 s all succeed
    (without the queue, this failed in 2 runs of 3 with StoreLocked)."""
    store = af.SQLiteStore(tmp_path / "s.db")
    stop = threading.Event()
    errors: list[BaseException] = []
    saved = [0] * 8

    def saver(i: int) -> None:
        try:
            while not stop.is_set():
                store.save(*make_checkpoint(session=f"w{i}", chunks={"a": [b"x" * 64]}))
                saved[i] += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    threads = [threading.Thread(target=saver, args=(i,)) for i in range(8)]
    threads += [threading.Thread(target=busy) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        _until(lambda: all(saved))
        for k in range(4):
            lease = store.acquire_lease(f"x{k}", "tester", 30.0, lock_wait=1.0)
            assert lease.session == f"x{k}"
    finally:
        stop.set()
        for thread in threads:
            thread.join(BOUND * 6)
        store.close()
    assert errors == []


def test_a_forked_child_has_a_queue_of_its_own(tmp_path: Path) -> None:
    """A child forked while a thread of its parent holds the file's queue writes in a
    queue of its own: the parent's holder does not exist in the child, and would never
    hand it on."""
    path = tmp_path / "s.db"
    with af.SQLiteStore(path) as store:
        store.save(*make_checkpoint(session="parent"))
        parents = writer_queue(path)
        assert parents.acquire(BOUND)  # held (by this thread) across the fork
        try:

            def child() -> None:
                with af.SQLiteStore(path) as own:
                    lease = own.acquire_lease("child", "the child", 60.0, lock_wait=1.0)
                    own.release_lease(lease)

            assert in_child(child) == 0
        finally:
            parents.release()


def test_a_forked_child_opens_connections_of_its_own(tmp_path: Path) -> None:
    """A store used in a forked child never uses the parent's SQLite connection (SQLite
    forbids carrying one across fork(2)); its saves land beside the parent's."""
    with af.SQLiteStore(tmp_path / "s.db") as store:
        first, blobs = make_checkpoint(session="parent")
        store.save(first, blobs)
        parents = store._connections.conn()

        def child() -> None:
            assert store._connections.conn() is not parents
            store.save(*make_checkpoint(session="child"))

        assert in_child(child) == 0
        assert store._connections.conn() is parents
        assert [cp.session for cp in store.list()] == ["parent", "child"]
        assert store.verify() == []
