"""Who owns a session: its store lease, taken at open, renewed while open, released at close.

Opening a session for writing with a store (``wf.session(id, store=...)``,
``wf.resume(...)``) takes the session's lease in that store (see
:meth:`~actorflow.storage.CheckpointStore.acquire_lease`); every checkpoint the
session writes carries it, and the store refuses a save whose lease was taken over.
One renewer thread per process keeps every open session's lease alive: it renews
each one a third of its TTL after the last renewal, and exits when the last owned
session closes (so no thread outlives the sessions that needed it).

Default TTL: :data:`DEFAULT_LEASE_TTL` (10 s). A session whose process dies (even by
``kill -9``) can be taken over at most one TTL after its last renewal; a live
owner renews every TTL/3, so it keeps the session through a stall of up to ~2/3 of
the TTL (a long GC pause, a slow disk). See ``docs/sessions.md``.
"""

from __future__ import annotations

import inspect
import os
import socket
import sys
import threading
import time
import weakref
from typing import Final

from actorflow.errors import CheckpointError, LeaseLost, SessionOwned
from actorflow.storage import CheckpointStore, Lease

from ._logging import get_logger

__all__ = ["DEFAULT_LEASE_TTL", "LOCK_WAIT_FLOOR", "Ownership", "acquire", "owner_name"]

DEFAULT_LEASE_TTL: Final = 10.0
"""Seconds a session's lease lasts without renewal (the takeover time after a crash)."""
_RENEW_EVERY: Final = 1 / 3
"""Renew when this fraction of the TTL has passed since the last renewal."""
_RETRY_EVERY: Final = 1 / 10
"""After a failed renewal (the store unavailable), try again after this fraction."""

LOCK_WAIT_FLOOR: Final = 2.0
"""Seconds an open may always wait for a store's lock, also with ``wait=0``.

Saves hold those locks for milliseconds (a SQLite file's one write lock is taken
by every save of every session: a grant may queue behind a few). Only a stalled
holder keeps one longer; then the open fails after ``max(wait, LOCK_WAIT_FLOOR)``."""

_log = get_logger("actorflow.ownership")

_LOCK_WAIT: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()
"""Store class -> whether its acquire_lease takes ``lock_wait=``."""


def _takes_lock_wait(store: CheckpointStore) -> bool:
    """Whether ``store.acquire_lease`` accepts ``lock_wait=`` (a store written before
    it does not; then its locks are waited for as long as it waits)."""
    kind = type(store)
    known = _LOCK_WAIT.get(kind)
    if known is None:
        try:
            params = inspect.signature(store.acquire_lease).parameters.values()
        except (TypeError, ValueError):  # no signature to read: call it the old way
            known = False
        else:
            known = any(
                p.name == "lock_wait" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params
            )
        if not known:
            _log.warning(
                "store without acquire_lease(lock_wait=): wait= cannot bound its locks",
                store=kind.__qualname__,
            )
        _LOCK_WAIT[kind] = known
    return known


def owner_name() -> str:
    """How this process and thread name themselves on a lease: pid, host, process/thread."""
    thread = threading.current_thread().name
    # A multiprocessing worker's name ("Process-3", "SpawnPoolWorker-2") says which
    # worker it is; multiprocessing is not imported for it when nothing else did.
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None:
        thread = f"{multiprocessing.current_process().name}/{thread}"
    return f"pid {os.getpid()} on {socket.gethostname()} ({thread})"


def check_lease_options(wait: float, ttl: float) -> None:
    """ValueError unless ``wait`` >= 0 and ``ttl`` > 0 (both finite numbers)."""
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < 1e9:
        raise ValueError(f"wait= must be a number of seconds >= 0, got {wait!r}")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < 1e9:
        raise ValueError(f"lease_ttl= must be a number of seconds > 0, got {ttl!r}")


def acquire(
    store: CheckpointStore, session: str, *, ttl: float, wait: float, owner: str | None = None
) -> Ownership:
    """Take ``session``'s lease in ``store``, waiting up to ``wait`` seconds for its holder.

    While the holder's lease lives the call polls (every 50 ms at first, up to every
    0.5 s, never past the holder's expiry or the deadline). ``wait`` also bounds the
    store's own locks (``acquire_lease(lock_wait=)``): what is left of it, and never
    less than :data:`LOCK_WAIT_FLOOR`, so a grant queued behind ordinary saves is not
    refused with ``wait=0``.

    Raises:
        SessionOwned: the session is still held when ``wait`` runs out (at once if 0).
        StoreLocked: a lock of the store stayed held past the bound, and no live
            lease holds the session (a process stalled inside a save).
        ValueError: ``wait`` or ``ttl`` is out of range.
    """
    check_lease_options(wait, ttl)
    if not callable(getattr(store, "acquire_lease", None)):
        raise CheckpointError(
            f"{type(store).__name__} does not implement session leases (acquire_lease, "
            "renew_lease, release_lease, current_lease, save(..., lease=)); every "
            "CheckpointStore must, to be written by a session: see docs/storage.md"
        )
    name = owner or owner_name()
    deadline = time.monotonic() + wait
    delay = 0.05
    bounded = _takes_lock_wait(store)
    while True:
        try:
            if bounded:
                lock_wait = max(deadline - time.monotonic(), LOCK_WAIT_FLOOR)
                lease = store.acquire_lease(session, name, ttl, lock_wait=lock_wait)
            else:
                lease = store.acquire_lease(session, name, ttl)
        except SessionOwned as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            until_expiry = exc.holder.expires_at - time.time()
            if not until_expiry > 0.0:  # also NaN: a damaged row's (stores treat it as expired)
                until_expiry = 0.0
            until_expiry += 0.01
            threading.Event().wait(min(delay, left, until_expiry))
            delay = min(delay * 2, 0.5)
            continue
        return Ownership(store, lease, ttl)


class Ownership:
    """One open session's hold on its lease. Thread-safe.

    Registered with the process's renewer from creation until :meth:`release`.
    """

    def __init__(self, store: CheckpointStore, lease: Lease, ttl: float) -> None:
        self.store = store
        self.ttl = ttl
        self._lease = lease
        self.first = lease
        """The lease as granted: what saves carry (the token is what the store checks)."""
        self.lost: LeaseLost | None = None
        """Set when a renewal found the lease taken over; saves then fail with it too."""
        self.due = time.monotonic() + ttl * _RENEW_EVERY
        self._released = False
        _RENEWER.register(self)

    @property
    def lease(self) -> Lease:
        """The lease as last granted or renewed (``expires_at`` moves, the token not)."""
        return self._lease

    def renew(self) -> bool:
        """Renew now (renewer thread). Returns False once the lease is lost (or released)."""
        try:
            self._lease = self.store.renew_lease(self._lease, self.ttl)
        except LeaseLost as exc:
            if self._released:
                return False  # released meanwhile by close(): not a loss
            self.lost = exc
            _log.warning("session lease lost", session=self._lease.session, error=str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - the medium failed: try again soon
            _log.warning(
                "session lease renewal failed", session=self._lease.session, error=str(exc)
            )
            self.due = time.monotonic() + self.ttl * _RETRY_EVERY
            return True
        self.due = time.monotonic() + self.ttl * _RENEW_EVERY
        return True

    def release(self) -> None:
        """Stop renewing and release the lease in the store. Idempotent; never raises."""
        if self._released:
            return
        self._released = True
        _RENEWER.unregister(self)
        try:
            self.store.release_lease(self._lease)
        except CheckpointError as exc:  # a closed or failing store: the lease expires instead
            _log.warning("session lease not released", session=self._lease.session, error=str(exc))

    def release_with(self, owner: object) -> None:
        """Release when ``owner`` is garbage-collected (a session dropped without close())."""
        weakref.finalize(owner, self.release)


class _Renewer:
    """The one thread per process that renews every open session's lease.

    It sleeps until the earliest renewal is due (or the set of sessions changes) and
    exits when no session is left; the next registration starts a new one.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held: set[Ownership] = set()
        self._thread: threading.Thread | None = None

    def register(self, ownership: Ownership) -> None:
        with self._cond:
            self._held.add(ownership)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="actorflow-lease-renewer", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def unregister(self, ownership: Ownership) -> None:
        """Forget ``ownership``; if it was the last, wait for the thread to end."""
        with self._cond:
            self._held.discard(ownership)
            self._cond.notify()
            thread = self._thread if not self._held else None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=60)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._held:
                    self._thread = None
                    return
                now = time.monotonic()
                due = [o for o in self._held if o.due <= now]
                if not due:
                    self._cond.wait(min(o.due for o in self._held) - now)
                    continue
            lost = [o for o in due if not o.renew()]  # outside the lock: the store may block
            if lost:
                with self._cond:
                    self._held.difference_update(lost)

    def active(self) -> bool:
        """Whether the renewer thread is running (for tests)."""
        with self._cond:
            return self._thread is not None


_RENEWER = _Renewer()
