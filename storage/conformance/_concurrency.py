"""Conformance kit, shared handles: one store object used by many sessions, and closed under them.

Private: the public front is ``actorflow.storage.conformance``. Requires pytest.

A store handle is safe to share: one store object serves any number of sessions at
once, from threads and asyncio tasks (processes open a handle each: see
``test_concurrent_processes_lose_nothing``). ``close()`` while calls are in flight
never crashes the process: each of those calls finishes, or raises
:class:`~actorflow.errors.StoreClosed`, and so does every call made after it;
``close()`` itself returns within :data:`CLOSE_BOUND_S`. A session here is the
store calls a workflow session makes (a lease, saves fenced by it, reads back);
actorflow's own tests run the same cases with real workflows on the built-in stores.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
import traceback
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest

from actorflow.errors import StoreClosed
from actorflow.storage._format import Checkpoint, blob_digest
from actorflow.storage._protocol import CheckpointStore

from ._base import (
    WAIT_S,
    KitBase,
    StoreFactory,
    child_processes,
    join_children,
    make_checkpoint,
    save_lineage_in_child,
    save_new,
)
from ._leases import LONG_TTL, leased

SESSIONS = 20
"""Sessions sharing one handle."""
SAVES = 10
"""Checkpoints each session saves."""
BIG = 16 * 1024
"""Bytes of the new blob every save brings (so logs, segments and pools turn over)."""
SHARED = b"one blob every session's records name"
CLOSE_BOUND_S = 10.0
"""How long ``close()`` may take while calls are in flight."""
_BOUND_S = WAIT_S / 3
"""Bound on each wait of the close test (its three add up to less than ``WAIT_S``)."""

Calls = Generator[partial[Any], Any, list[Checkpoint]]
"""A session's store calls, one at a time: it yields each call and is sent its result."""


def session_calls(store: CheckpointStore, session: str) -> Calls:
    """What one session does with a shared handle: take its lease, save a lineage fenced
    by it, read every record and blob back as it goes, renew, release. Returns the lineage.
    """
    lease = yield partial(store.acquire_lease, session, f"kit {session}", LONG_TTL)
    lineage: list[Checkpoint] = []
    for i in range(SAVES):
        big = os.urandom(BIG)
        checkpoint, blobs = make_checkpoint(
            session=session,
            parent=lineage[-1] if lineage else None,
            chunks={"shared": [SHARED], "own": [f"{session}/{i}".encode(), big]},
        )
        yield partial(store.save, checkpoint, blobs, lease=lease)
        lineage.append(checkpoint)
        latest = yield partial(store.latest, session=session)
        assert latest == checkpoint, f"session {session}: latest() is not its last save"
        loaded = yield partial(store.load, checkpoint.id)
        assert loaded == checkpoint, f"session {session}: load() differs from what it saved"
        data = yield partial(store.load_blob, blob_digest(big))
        assert data == big, f"session {session}: a blob it saved reads back different"
        if i % 4 == 3:
            lease = yield partial(store.renew_lease, lease, LONG_TTL)
    yield partial(store.release_lease, lease)
    return lineage


def drive(calls: Calls) -> list[Checkpoint]:
    """Make a session's calls in this thread."""
    result: Any = None
    try:
        while True:
            result = calls.send(result)()
    except StopIteration as stop:
        lineage: list[Checkpoint] = stop.value
        return lineage


async def adrive(calls: Calls) -> list[Checkpoint]:
    """Make a session's calls from an asyncio task, each in a worker thread (what an
    async service does with a blocking store: ``asyncio.to_thread``)."""
    result: Any = None
    try:
        while True:
            result = await asyncio.to_thread(calls.send(result))
    except StopIteration as stop:
        lineage: list[Checkpoint] = stop.value
        return lineage


def check_lineages(store: CheckpointStore, lineages: dict[str, list[Checkpoint]]) -> None:
    """Every session's records are its lineage, whole, its lease released; verify() clean."""
    for session, lineage in sorted(lineages.items()):
        assert len(lineage) == SAVES
        assert store.list(session=session) == lineage, f"session {session} lost or gained records"
        assert store.history(lineage[-1].id) == lineage[::-1], f"session {session}: history"
        assert store.latest(session=session) == lineage[-1], f"session {session}: latest()"
        assert store.current_lease(session) is None, f"session {session}: its lease is live"
    assert store.load_blob(blob_digest(SHARED)) == SHARED
    problems = store.verify()
    assert problems == [], f"verify() after sessions shared the handle: {problems}"


def close_under_load(store: CheckpointStore, prefix: str) -> tuple[list[str], list[str]]:
    """Run SESSIONS threads of store calls on ``store`` and close it under them.

    Each thread runs sessions (see :func:`session_calls`) until one of its calls has
    raised StoreClosed, or three made after ``close()`` returned have not. Returns the
    problems found (a call that raised anything else or succeeded after the close, a
    thread still in a call long after it, a slow close) and the ids of the saves that
    returned.
    """
    problems: list[str] = []
    saved: list[str] = []
    lock = threading.Lock()
    busy = threading.Event()
    closed = threading.Event()
    done = 0

    def note(problem: str) -> None:
        with lock:
            problems.append(problem)

    def worker(n: int) -> None:
        nonlocal done
        calls, result, rounds, after_close = session_calls(store, f"{prefix}{n}"), None, 0, 0
        while after_close < 3:
            late = closed.is_set()
            try:
                call = calls.send(result)
            except StopIteration:  # a whole session done: another one
                rounds += 1
                calls, result = session_calls(store, f"{prefix}{n}-{rounds}"), None
                continue
            except AssertionError as exc:  # a wrong answer
                note(f"{prefix}{n}: {exc}")
                return
            name = getattr(call.func, "__name__", repr(call.func))
            try:
                result = call()
            except StoreClosed:
                return
            except Exception as exc:  # noqa: BLE001 - the kit reports every other error
                trace = "".join(traceback.format_exception(exc))[-2000:]
                note(f"{name}() raised {type(exc).__name__}, not StoreClosed: {exc}\n{trace}")
                return
            if late:
                after_close += 1
                note(f"{name}() called after close() had returned succeeded")
            with lock:
                if name == "save" and not late:
                    saved.append(call.args[0].id)
                done += 1
                if done >= 10 * SESSIONS:
                    busy.set()

    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(SESSIONS)]
    for thread in threads:
        thread.start()
    if not busy.wait(_BOUND_S):
        problems.append(f"the sessions made too few calls in {_BOUND_S} s")
    started = time.monotonic()
    try:
        store.close()
    except Exception as exc:  # noqa: BLE001 - the kit reports it
        problems.append(f"close() raised {type(exc).__name__}: {exc}")
    took = time.monotonic() - started
    closed.set()
    if took > CLOSE_BOUND_S:
        problems.append(f"close() took {took:.1f} s with calls in flight (bound {CLOSE_BOUND_S} s)")
    deadline = time.monotonic() + _BOUND_S
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    stuck = sum(thread.is_alive() for thread in threads)
    if stuck:
        problems.append(f"{stuck} session(s) still in a call {_BOUND_S} s after close()")
    return problems, saved


def close_under_load_in_child(*, factory: StoreFactory, prefix: str, results: Any) -> None:
    """Child-process body of the close test (module level so a child process finds it)."""
    try:
        store = factory()
        results.put(close_under_load(store, prefix))
    except BaseException:
        results.put(([traceback.format_exc()], []))
        raise


class ConcurrencyTests(KitBase):
    """One handle shared by many sessions at once, and closed while they use it."""

    def test_one_handle_serves_sessions_in_threads(self, store: CheckpointStore) -> None:
        """20 threads, each a session (lease, fenced saves, reads back), on one store object:
        nothing fails, every lineage is whole, verify() is clean."""
        leased(store)
        barrier = threading.Barrier(SESSIONS, timeout=WAIT_S)

        def session(name: str) -> list[Checkpoint]:
            barrier.wait()
            return drive(session_calls(store, name))

        names = [f"thread{n}" for n in range(SESSIONS)]
        with ThreadPoolExecutor(SESSIONS) as pool:
            futures = {name: pool.submit(session, name) for name in names}
            lineages = {name: f.result(timeout=WAIT_S) for name, f in futures.items()}
        check_lineages(store, lineages)

    def test_one_handle_serves_sessions_in_asyncio_tasks(self, store: CheckpointStore) -> None:
        """20 asyncio tasks of one loop, each a session whose calls run in worker threads,
        on one store object: nothing fails, every lineage is whole, verify() is clean."""
        leased(store)

        async def main() -> list[list[Checkpoint]]:
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(SESSIONS))
            sessions = (adrive(session_calls(store, f"task{n}")) for n in range(SESSIONS))
            return await asyncio.wait_for(asyncio.gather(*sessions), WAIT_S)

        found = asyncio.run(main())
        check_lineages(store, {f"task{n}": lineage for n, lineage in enumerate(found)})

    def test_close_under_load_raises_store_closed(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """close() from another thread while 20 sessions call the store: the process lives,
        every call succeeded or raised StoreClosed, every call after it raises StoreClosed,
        nothing hangs, close() returns within CLOSE_BOUND_S, and (durable stores) every save
        that returned is there afterwards, the store verifying clean.

        With ``multiprocess`` the sessions run in a child process, so that a crash
        (SIGSEGV) is reported as one instead of ending the test run."""
        leased(store)
        if getattr(store_factory, "multiprocess", False):
            problems, saved = self._close_in_child(store_factory)
        else:
            problems, saved = close_under_load(store, "closing")
        assert problems == [], "\n".join(problems)
        assert saved, "no save returned before the close"
        if getattr(store_factory, "durable", False):
            reopened = store_factory()
            try:
                for checkpoint_id in saved:  # raises CheckpointNotFound for a lost save
                    assert reopened.load(checkpoint_id).id == checkpoint_id
                problems = reopened.verify()
                assert problems == [], f"after a close under load: {problems}"
            finally:
                reopened.close()

    @staticmethod
    def _close_in_child(factory: StoreFactory) -> tuple[list[str], list[str]]:
        ctx = child_processes()
        results = ctx.Queue()
        child = ctx.Process(
            target=close_under_load_in_child,
            kwargs={"factory": factory, "prefix": "closing", "results": results},
        )
        child.start()
        report: tuple[list[str], list[str]] | None = None
        deadline = time.monotonic() + WAIT_S
        try:
            while report is None and time.monotonic() < deadline:
                try:
                    report = results.get(timeout=0.5)
                except queue.Empty:
                    if not child.is_alive() and results.empty():
                        break
            child.join(WAIT_S / 4)
            if child.is_alive():
                child.kill()
                child.join(WAIT_S / 4)
        finally:
            results.close()
            results.join_thread()
        if child.exitcode != 0:
            pytest.fail(
                "the process whose store was closed under its sessions died (exit status "
                f"{child.exitcode}; a negative one is the signal that killed it): {report}"
            )
        assert report is not None, "the child process reported nothing"
        return report

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

    def test_saves_sharing_new_blobs_in_any_order_all_succeed(self, store: CheckpointStore) -> None:
        """Sessions whose first records hold the same new blobs (the same first state),
        saved at once with the blobs in different orders, all succeed: a store that
        writes the blobs in the order given can deadlock two such saves."""
        threads, rounds = 8, 12
        barrier = threading.Barrier(threads, timeout=WAIT_S)
        saved: list[Checkpoint] = []

        def first_record(shared: list[bytes], r: int, n: int) -> None:
            turned = shared[n % len(shared) :] + shared[: n % len(shared)]
            ordered = turned if n % 2 else turned[::-1]
            # The blobs are given in the order of the chunks.
            checkpoint, blobs = make_checkpoint(session=f"o{r}-{n}", chunks={"e": ordered})
            barrier.wait()
            store.save(checkpoint, blobs)
            saved.append(checkpoint)  # atomic

        with ThreadPoolExecutor(threads) as pool:
            for r in range(rounds):
                shared = [f"round {r} blob {i}".encode() * 50 for i in range(24)]
                futures = [pool.submit(first_record, shared, r, n) for n in range(threads)]
                for future in futures:
                    future.result(timeout=WAIT_S)
        assert len(saved) == threads * rounds
        assert {cp.id for cp in store.list()} >= {cp.id for cp in saved}
        assert store.verify() == []

    def test_concurrent_processes_lose_nothing(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """Four processes saving into one store at once lose and damage nothing."""
        if not getattr(store_factory, "multiprocess", False):
            pytest.skip(f"{type(store_factory).__name__} is not shared across processes")
        processes, count = 4, 10
        ctx = child_processes()
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
