"""Conformance kit, part three: session leases (one owner per session, fencing tokens).

Private: the public front is ``actorflow.storage.conformance``. Requires pytest.

A store without the lease methods fails every test here, loudly, with the name of
what is missing: leases are part of the protocol, not an optional capability.
"""

from __future__ import annotations

import math
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest

from actorflow.errors import LeaseLost, SessionOwned
from actorflow.storage._format import Checkpoint
from actorflow.storage._lease import MAX_TTL, Lease
from actorflow.storage._protocol import CancelRequests, CheckpointStore

from ._base import WAIT_S, KitBase, StoreFactory, child_processes, make_checkpoint, save_new

_METHODS = ("acquire_lease", "renew_lease", "release_lease", "current_lease")
SHORT_TTL = 0.3
"""Seconds: the TTL of leases the kit waits out in one process (takeover tests)."""
KILL_TTL = 1.0
"""Seconds: the TTL of the lease a killed child process held."""
LONG_TTL = 60.0
"""Seconds: the TTL of leases that must not expire during a test."""


def leased(store: CheckpointStore) -> CheckpointStore:
    """``store``, after failing the test unless it implements every lease method."""
    missing = [m for m in _METHODS if not callable(getattr(store, m, None))]
    if missing:
        pytest.fail(
            f"{type(store).__name__} does not implement session leases (missing "
            f"{', '.join(missing)}); every CheckpointStore must, see docs/sessions.md"
        )
    return store


def wait_until_free(store: CheckpointStore, session: str, bound: float) -> float:
    """Poll until ``session`` has no live lease; returns the seconds waited."""
    start = time.monotonic()
    while store.current_lease(session) is not None:
        if time.monotonic() - start > bound:
            pytest.fail(f"session {session!r} still leased after {bound} s")
        time.sleep(0.02)
    return time.monotonic() - start


def race_for_session_in_child(
    *, factory: StoreFactory, session: str, name: str, barrier: Any, results: Any
) -> None:
    """Child body: acquire the session, and if granted, save a lineage of three with it."""
    try:
        store = factory()
        try:
            barrier.wait(timeout=WAIT_S)
            try:
                lease = store.acquire_lease(session, f"{name} pid {os.getpid()}", LONG_TTL)
            except SessionOwned as exc:
                results.put((name, "owned", exc.holder.owner))
                return
            parent = None
            for _ in range(3):
                parent = _save_with(store, session, parent, lease)
            store.release_lease(lease)
            results.put((name, "won", lease.token))
        finally:
            store.close()
    except BaseException:
        results.put((name, "error", traceback.format_exc()))
        raise


def hold_session_in_child(*, factory: StoreFactory, session: str, ttl: float, results: Any) -> None:
    """Child body: acquire the session, save once, report, then block until killed."""
    try:
        store = factory()
        lease = store.acquire_lease(session, f"doomed pid {os.getpid()}", ttl)
        first = _save_with(store, session, None, lease)
        results.put(("held", lease, first.id))
    except BaseException:
        results.put(("error", traceback.format_exc(), ""))
        raise
    threading.Event().wait(WAIT_S)  # until SIGKILL (bounded should the parent vanish)


def _save_with(
    store: CheckpointStore, session: str, parent: Checkpoint | None, lease: Lease
) -> Checkpoint:
    checkpoint, blobs = make_checkpoint(session=session, parent=parent)
    store.save(checkpoint, blobs, lease=lease)
    return checkpoint


def _heads(store: CheckpointStore, session: str) -> set[str]:
    """Ids of the records of ``session`` that no other record names as parent."""
    records = store.list(session=session)
    parents = {cp.parent_id for cp in records}
    return {cp.id for cp in records if cp.id not in parents}


def _collect(results: Any, children: list[Any], count: int) -> list[Any]:
    reports: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(reports) < count and time.monotonic() < deadline:
        try:
            reports.append(results.get(timeout=0.2))
        except queue.Empty:
            if not any(c.is_alive() for c in children):
                break
    return reports


def _reap(children: list[Any], results: Any) -> None:
    for child in children:
        child.join(timeout=WAIT_S)
        if child.is_alive():
            child.kill()
            child.join(timeout=WAIT_S)
    results.close()
    results.join_thread()


class LeaseTests(KitBase):
    """Ownership of a session: acquire, renew, release, fencing on save, takeover."""

    def test_implements_leases(self, store: CheckpointStore) -> None:
        """Every lease method exists (a store without them fails here, not skips)."""
        leased(store)

    def test_acquire_grants_a_lease(self, store: CheckpointStore) -> None:
        """acquire_lease returns the session, owner, a token >= 1 and an expiry ~ttl ahead."""
        before = time.time()
        lease = leased(store).acquire_lease("s", "owner a", LONG_TTL)
        assert (lease.session, lease.owner) == ("s", "owner a")
        assert lease.token >= 1
        assert before + LONG_TTL - 5 <= lease.expires_at <= time.time() + LONG_TTL + 5
        assert store.current_lease("s") == lease
        assert store.current_lease("other") is None

    def test_ttl_must_be_positive(self, store: CheckpointStore) -> None:
        """A ttl of zero or less (or beyond MAX_TTL) is a ValueError, for acquire and renew."""
        for ttl in (0, -1.0, MAX_TTL * 2):
            with pytest.raises(ValueError, match="ttl"):
                leased(store).acquire_lease("s", "a", ttl)
        lease = store.acquire_lease("s", "a", LONG_TTL)
        with pytest.raises(ValueError, match="ttl"):
            store.renew_lease(lease, 0)

    def test_acquire_takes_a_lock_wait(self, store: CheckpointStore) -> None:
        """acquire_lease(lock_wait=) bounds the store's lock waits; a live lease still
        refuses at once (the bound is for locks, not for the holder to let go)."""
        lease = leased(store).acquire_lease("s", "owner a", LONG_TTL, lock_wait=0.5)
        started = time.monotonic()
        with pytest.raises(SessionOwned, match="owner a"):
            store.acquire_lease("s", "owner b", LONG_TTL, lock_wait=WAIT_S)
        assert time.monotonic() - started < WAIT_S / 2
        for bad in (-1.0, math.nan):
            with pytest.raises(ValueError, match="lock_wait"):
                store.acquire_lease("t", "owner b", LONG_TTL, lock_wait=bad)
        store.release_lease(lease)
        assert store.acquire_lease("s", "owner b", LONG_TTL, lock_wait=0.0).token > lease.token

    def test_second_owner_is_refused_naming_the_holder(self, store: CheckpointStore) -> None:
        """A live lease refuses every other acquire, the same owner string too."""
        lease = leased(store).acquire_lease("s", "owner a", LONG_TTL)
        for owner in ("owner b", "owner a"):
            with pytest.raises(SessionOwned, match="owner a") as caught:
                store.acquire_lease("s", owner, LONG_TTL)
            assert caught.value.holder == lease
        assert store.acquire_lease("t", "owner b", LONG_TTL).session == "t"

    def test_release_frees_the_session_and_tokens_keep_growing(
        self, store: CheckpointStore
    ) -> None:
        """Release ends the lease (idempotently); the next grant has a greater token."""
        tokens = []
        for n in range(3):
            lease = leased(store).acquire_lease("s", f"owner {n}", LONG_TTL)
            tokens.append(lease.token)
            store.release_lease(lease)
            store.release_lease(lease)
            assert store.current_lease("s") is None
        assert tokens == sorted(set(tokens))

    def test_expired_lease_is_taken_over_with_a_greater_token(self, store: CheckpointStore) -> None:
        """After its TTL a lease no longer holds; another owner takes over, its token greater."""
        first = leased(store).acquire_lease("s", "slow owner", SHORT_TTL)
        wait_until_free(store, "s", SHORT_TTL + WAIT_S / 4)
        second = store.acquire_lease("s", "eager owner", LONG_TTL)
        assert second.token > first.token
        with pytest.raises(LeaseLost):
            store.renew_lease(first, LONG_TTL)
        store.release_lease(first)  # stale: ignored, the new lease still holds
        assert store.current_lease("s") == second

    def test_damaged_lease_expiry_counts_as_expired(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A lease row whose expiry no grant can make (NaN, infinite, absurdly far) is expired.

        Every check agrees (current_lease, acquire, a save without a lease), so an
        acquire neither loops nor raises about it; the next owner takes over with a
        greater token and the damaged lease's token can no longer save.
        """
        leased(store)
        set_expiry: Callable[[str, float], bool] | None = getattr(
            store_factory, "set_lease_expiry", None
        )
        if set_expiry is None:
            pytest.skip(f"{type(store_factory).__name__} has no set_lease_expiry() hook")
        for n, expires_at in enumerate([math.nan, math.inf, 1e308, -math.inf]):
            session = f"s{n}"
            damaged = store.acquire_lease(session, "damaged owner", LONG_TTL)
            first = _save_with(store, session, None, damaged)
            if not set_expiry(session, expires_at):
                continue  # the medium cannot hold this value (SQLite has no NaN)
            assert store.current_lease(session) is None, expires_at
            plain, blobs = make_checkpoint(session=session, parent=first)
            store.save(plain, blobs)  # no live lease holds the session: this lands
            taker = store.acquire_lease(session, "taker", LONG_TTL)
            assert taker.token > damaged.token
            assert store.current_lease(session) == taker
            late, blobs = make_checkpoint(session=session, parent=plain)
            with pytest.raises(LeaseLost, match="taker"):
                store.save(late, blobs, lease=damaged)
            with pytest.raises(LeaseLost):
                store.renew_lease(damaged, LONG_TTL)
            with pytest.raises(SessionOwned, match="taker"):
                store.acquire_lease(session, "third", LONG_TTL)

    def test_renew_extends_a_current_lease(self, store: CheckpointStore) -> None:
        """renew_lease moves expires_at forward, even past expiry if nobody took over."""
        lease = leased(store).acquire_lease("s", "a", SHORT_TTL)
        longer = store.renew_lease(lease, LONG_TTL)
        assert (longer.session, longer.token, longer.owner) == ("s", lease.token, "a")
        assert longer.expires_at > lease.expires_at
        assert store.current_lease("s") == longer
        short = store.renew_lease(longer, SHORT_TTL)
        wait_until_free(store, "s", SHORT_TTL + WAIT_S / 4)
        revived = store.renew_lease(short, LONG_TTL)
        assert revived.token == lease.token
        assert store.current_lease("s") == revived
        store.release_lease(revived)
        with pytest.raises(LeaseLost):
            store.renew_lease(revived, LONG_TTL)

    def test_a_cancel_request_is_noted_for_the_holder(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """request_cancel notes a run on the live lease, where current_lease and
        renew_lease show it to the holder (another handle's request too); a later one
        replaces it; it changes neither token nor expiry nor what saves are taken;
        without a live lease (never granted, released, expired) nothing is noted and
        it says so; a new grant starts without one."""
        if not isinstance(store, CancelRequests):
            pytest.skip(f"{type(store).__name__} carries no cancel requests (optional)")
        lease = leased(store).acquire_lease("s", "holder", LONG_TTL)
        assert lease.cancel_requested is None
        durable = getattr(store_factory, "durable", False)
        other = store_factory() if durable else store  # another handle, where there are
        try:
            assert isinstance(other, CancelRequests)
            assert other.request_cancel("s", "run-1") is True
        finally:
            if durable:
                other.close()
        noted = store.current_lease("s")
        assert noted is not None and noted.cancel_requested == "run-1"
        assert (noted.token, noted.owner, noted.expires_at) == (
            lease.token,
            lease.owner,
            lease.expires_at,
        )
        assert store.request_cancel("s", "run-2") is True
        renewed = store.renew_lease(lease, LONG_TTL)
        assert renewed.cancel_requested == "run-2" and renewed.token == lease.token
        checkpoint, blobs = make_checkpoint(session="s")
        store.save(checkpoint, blobs, lease=lease)  # the holder decides: saves go on
        for bad in ("", None, 7):
            with pytest.raises(ValueError, match="run"):
                store.request_cancel("s", bad)  # type: ignore[arg-type]
        assert store.request_cancel("never-leased", "run-1") is False
        assert store.current_lease("never-leased") is None
        store.release_lease(renewed)
        assert store.request_cancel("s", "run-3") is False
        again = store.acquire_lease("s", "next holder", SHORT_TTL)
        assert again.cancel_requested is None
        assert store.current_lease("s") == again
        wait_until_free(store, "s", SHORT_TTL + WAIT_S / 4)
        assert store.request_cancel("s", "run-4") is False  # expired: nobody runs it

    def test_save_with_the_current_lease(self, store: CheckpointStore) -> None:
        """Saves carrying the current lease extend the lineage, also past expiry."""
        lease = leased(store).acquire_lease("s", "a", LONG_TTL)
        first = _save_with(store, "s", None, lease)
        second = _save_with(store, "s", first, lease)
        assert store.history("s") == [second, first]

    def test_stale_token_is_refused_and_nothing_written(self, store: CheckpointStore) -> None:
        """A save with a taken-over (or released) lease raises LeaseLost; no record lands."""
        old = leased(store).acquire_lease("s", "old owner", SHORT_TTL)
        first = _save_with(store, "s", None, old)
        wait_until_free(store, "s", SHORT_TTL + WAIT_S / 4)
        new = store.acquire_lease("s", "new owner", LONG_TTL)
        late, blobs = make_checkpoint(session="s", parent=first)
        with pytest.raises(LeaseLost, match="new owner"):
            store.save(late, blobs, lease=old)
        assert store.list(session="s") == [first]
        assert not store.has_blobs(blobs)
        store.release_lease(new)
        with pytest.raises(LeaseLost):
            store.save(late, blobs, lease=new)
        assert store.list(session="s") == [first]

    def test_lease_of_another_session_is_refused(self, store: CheckpointStore) -> None:
        """A lease fences only its own session: saving another's records with it raises."""
        lease = leased(store).acquire_lease("s", "a", LONG_TTL)
        checkpoint, blobs = make_checkpoint(session="t")
        with pytest.raises(LeaseLost):
            store.save(checkpoint, blobs, lease=lease)
        assert store.list() == []

    def test_leaseless_save_refused_under_a_live_lease(self, store: CheckpointStore) -> None:
        """Without a lease, a save is refused while one holds the session, allowed after."""
        lease = leased(store).acquire_lease("s", "holder", LONG_TTL)
        checkpoint, blobs = make_checkpoint(session="s")
        with pytest.raises(SessionOwned, match="holder"):
            store.save(checkpoint, blobs)
        assert store.list() == []
        save_new(store, session="other")  # other sessions are not held
        store.release_lease(lease)
        store.save(checkpoint, blobs)
        assert store.list(session="s") == [checkpoint]

    def test_two_threads_race_one_wins(self, store: CheckpointStore) -> None:
        """Of threads acquiring one session at once exactly one gets it; tokens are unique."""
        leased(store)
        threads, start = 6, threading.Barrier(6)
        won: list[Lease] = []
        refused: list[Lease] = []
        errors: list[BaseException] = []

        def contend(n: int) -> None:
            try:
                start.wait(timeout=WAIT_S)
                won.append(store.acquire_lease("s", f"thread {n}", LONG_TTL))
            except SessionOwned as exc:
                refused.append(Lease.of(exc.holder))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        workers = [threading.Thread(target=contend, args=(n,)) for n in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=WAIT_S)
        assert errors == []
        assert len(won) == 1
        assert len(refused) == threads - 1
        assert all(holder == won[0] for holder in refused)

    def test_two_processes_race_one_wins(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """Of two processes acquiring one session at once, one owns it and writes; one head."""
        leased(store)
        if not getattr(store_factory, "multiprocess", False):
            pytest.skip(f"{type(store_factory).__name__} is not shared across processes")
        ctx = child_processes()
        barrier, results = ctx.Barrier(2), ctx.Queue()
        children = [
            ctx.Process(
                target=race_for_session_in_child,
                kwargs={
                    "factory": store_factory,
                    "session": "contested",
                    "name": name,
                    "barrier": barrier,
                    "results": results,
                },
            )
            for name in ("p1", "p2")
        ]
        for child in children:
            child.start()
        try:
            reports = _collect(results, children, 2)
        finally:
            _reap(children, results)
        assert [r for r in reports if r[1] == "error"] == []
        outcomes = sorted(r[1] for r in reports)
        # Either one refused the other's live lease, or the first finished (and
        # released) before the second asked: then both own it, one after the other.
        assert outcomes in (["owned", "won"], ["won", "won"])
        records = store.list(session="contested")
        assert len(records) == 3 * outcomes.count("won")
        assert len(_heads(store, "contested")) == outcomes.count("won")
        assert store.verify() == []

    def test_sigkilled_owner_is_taken_over_after_the_ttl(
        self, store: CheckpointStore, store_factory: StoreFactory
    ) -> None:
        """A killed owner's session is refused until its TTL ends, then granted; its token is dead."""
        leased(store)
        if not getattr(store_factory, "multiprocess", False):
            pytest.skip(f"{type(store_factory).__name__} is not shared across processes")
        ctx = child_processes()
        results = ctx.Queue()
        child = ctx.Process(
            target=hold_session_in_child,
            kwargs={
                "factory": store_factory,
                "session": "s",
                "ttl": KILL_TTL,
                "results": results,
            },
        )
        child.start()
        try:
            reports = _collect(results, [child], 1)
            assert reports and reports[0][0] == "held", reports
            _, dead, first_id = reports[0]
            os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
            child.join(timeout=WAIT_S)
        finally:
            _reap([child], results)
        assert child.exitcode == -signal.SIGKILL
        waited = wait_until_free(store, "s", KILL_TTL + WAIT_S / 4)
        assert waited <= KILL_TTL + 2.0
        taker = store.acquire_lease("s", "taker", LONG_TTL)
        assert taker.token > dead.token
        late, blobs = make_checkpoint(session="s", parent=store.load(first_id))
        with pytest.raises(LeaseLost):
            store.save(late, blobs, lease=dead)
        second = _save_with(store, "s", store.load(first_id), taker)
        assert _heads(store, "s") == {second.id}
