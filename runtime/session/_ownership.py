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

import contextvars
import inspect
import math
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
import weakref
from dataclasses import dataclass
from typing import Final

from actorflow._forks import forget_in_children
from actorflow.errors import CheckpointError, LeaseLost, SessionOwned
from actorflow.runtime._logging import get_logger
from actorflow.storage import CancelRequests, CheckpointStore, Lease

__all__ = [
    "CANCEL_LOOK_EVERY",
    "DEFAULT_LEASE_TTL",
    "LOCK_WAIT_FLOOR",
    "Ownership",
    "ProcessIdentity",
    "acquire",
    "identity_of",
    "owner_gone",
    "owner_name",
    "this_process",
]

DEFAULT_LEASE_TTL: Final = 10.0
"""Seconds a session's lease lasts without renewal (the takeover time after a crash)."""
_RENEW_EVERY: Final = 1 / 3
"""Renew when this fraction of the TTL has passed since the last renewal."""
_RETRY_EVERY: Final = 1 / 10
"""After a failed renewal (the store unavailable), try again after this fraction."""

CANCEL_LOOK_EVERY: Final = 0.25
"""Seconds between two looks at the lease of a session whose run goes on, for a cancel
of that run another process asked for through the store (``CancelRequests``): how
long such a request takes at most to be seen (the run then stops at its next
barrier). One store read per look, only while a run goes on."""

LOCK_WAIT_FLOOR: Final = 1.0
"""Seconds an open with ``wait=0`` may still wait for a store's lock.

Saves hold those locks for milliseconds (a SQLite file's one write lock is taken
by every save of every session: a grant may queue behind a few), so "do not wait
for the owner" must not mean "fail if a save is under way". Only a stalled holder
keeps a lock longer; then the open fails after this long. With ``wait > 0`` the
lock is waited for within what is left of ``wait``, but at least ``wait`` or this,
whichever is less: a holder that lets go as the wait runs out must not leave the
last attempt too little time to queue behind a save."""

_log = get_logger("actorflow.ownership")

ABANDONED: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "actorflow_open_abandoned", default=None
)
"""Set while an open runs for a caller that may give up on it (``open_off_loop``, for
a task that can be cancelled): once the event is set, :func:`acquire` stops waiting
for the session's holder and raises, so the thread is free at once."""

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
    """How this process and thread name themselves on a lease: pid, host, process/thread.

    Where ``/proc`` tells, the name ends in a machine-readable identity tag (see
    :func:`owner_gone`): ``[actorflow-owner 1 host=h boot=<boot id> pidns=<inode>
    pid=4242 start=<ticks>]``.
    """
    thread = threading.current_thread().name
    # A multiprocessing worker's name ("Process-3", "SpawnPoolWorker-2") says which
    # worker it is; multiprocessing is not imported for it when nothing else did.
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None:
        thread = f"{multiprocessing.current_process().name}/{thread}"
    here = this_process()
    tag = "" if here is None else " " + here.tag()
    return f"pid {os.getpid()} on {socket.gethostname()} ({thread}){tag}"


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """Who a process is, for as long as its host runs: enough to prove it has exited.

    A pid alone is not: pids are reused, and each pid namespace (a container) has
    its own. So: the host's name, its boot id (``/proc/sys/kernel/random/boot_id``,
    new at every boot, shared by the containers of one kernel), the inode of the pid
    namespace (``/proc/self/ns/pid``), the pid, and the process's start time in
    clock ticks after boot (``/proc/<pid>/stat`` field 22), which a reused pid does
    not share.
    """

    host: str
    boot: str
    pidns: int
    pid: int
    start: int

    def tag(self) -> str:
        """The tag :func:`owner_name` appends and :func:`identity_of` parses."""
        return (
            f"[{_TAG_NAME} 1 host={urllib.parse.quote(self.host, safe='')} boot={self.boot}"
            f" pidns={self.pidns} pid={self.pid} start={self.start}]"
        )


_TAG_NAME: Final = "actorflow-owner"
_TAG: Final = re.compile(
    r" \[actorflow-owner 1 host=(?P<host>[A-Za-z0-9._~%-]{1,765})"
    r" boot=(?P<boot>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r" pidns=(?P<pidns>[1-9][0-9]{0,19}) pid=(?P<pid>[1-9][0-9]{0,9})"
    r" start=(?P<start>[0-9]{1,20})\]\Z"
)
_HERE: list[ProcessIdentity | None] = []
"""This process's identity, once read (a fork re-reads it: the pid differs)."""


def identity_of(owner: str) -> ProcessIdentity | None:
    """The identity tag at the end of a lease's owner string, or None if there is none
    or it is not exactly the form :meth:`ProcessIdentity.tag` writes."""
    found = _TAG.search(owner)
    if found is None:
        return None
    host = urllib.parse.unquote(found["host"], errors="strict")
    if urllib.parse.quote(host, safe="") != found["host"]:
        return None  # not how a tag is written: never trust it
    return ProcessIdentity(
        host, found["boot"], int(found["pidns"]), int(found["pid"]), int(found["start"])
    )


def this_process() -> ProcessIdentity | None:
    """This process's identity, or None where ``/proc`` cannot tell it (not Linux, no
    ``/proc``, or a ``/proc`` of another pid namespace)."""
    if _HERE and _HERE[0] is not None and _HERE[0].pid == os.getpid():
        return _HERE[0]
    if _HERE and _HERE[0] is None:
        return None
    found = _read_this_process()
    _HERE[:] = [found]
    return found


def _read_this_process() -> ProcessIdentity | None:
    pid = os.getpid()
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        pidns = os.readlink("/proc/self/ns/pid")
        stat = _stat(pid)
    except (OSError, UnicodeDecodeError):
        return None
    space = re.fullmatch(r"pid:\[([1-9][0-9]*)\]", pidns)
    if stat is None or space is None or not re.fullmatch(r"[0-9a-f-]{36}", boot):
        return None
    return ProcessIdentity(socket.gethostname(), boot, int(space[1]), pid, stat[1])


def _stat(pid: int, task: int | None = None) -> tuple[str, int] | None:
    """(state, start time) from ``/proc/<pid>[/task/<tid>]/stat``; None if it does not parse.

    Raises:
        FileNotFoundError / ProcessLookupError: no such process.
        OSError: it could not be read.
    """
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    # "pid (comm) state ... starttime ...": comm may hold spaces and parentheses.
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    if not head.startswith(f"{task or pid} (") or len(fields) < 20 or not fields[19].isdigit():
        return None
    return fields[0], int(fields[19])


def owner_gone(owner: str) -> bool:
    """Whether a lease's owner string names a process of this host that provably exited.

    True only when the owner's identity tag parses strictly, names this host (same
    host name, boot id and pid namespace as this process), and ``/proc`` shows that
    process is not there: no such pid, a pid with another start time (reused), or a
    process whose every thread has exited (a zombie: killed, not yet reaped). False
    whenever unsure: no tag, another host or boot, no ``/proc``, a read that fails,
    and for every process still there, stopped (``SIGSTOP``) or traced ones too.
    """
    claimed = identity_of(owner)
    here = this_process()
    if claimed is None or here is None:
        return False
    if (claimed.host, claimed.boot, claimed.pidns) != (here.host, here.boot, here.pidns):
        return False
    if (claimed.pid, claimed.start) == (here.pid, here.start):
        return False  # this very process (another of its sessions)
    try:
        stat = _stat(claimed.pid)
    except (FileNotFoundError, ProcessLookupError):
        return True  # no process has that pid in this namespace
    except OSError:
        return False
    if stat is None:
        return False
    state, start = stat
    if start != claimed.start:
        return True  # the pid was reused by a later process
    return state in _EXITED and _threads_exited(claimed.pid)


_EXITED: Final = ("Z", "X")
"""Process states of a process that has exited (a zombie waits for its parent's wait())."""


def _threads_exited(pid: int) -> bool:
    """Whether every thread of ``pid`` exited (a zombie leader may have live threads)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return True  # reaped meanwhile
    except OSError:
        return False
    for task in tasks:
        try:
            stat = _stat(pid, int(task))
        except (FileNotFoundError, ProcessLookupError):
            continue  # that thread is gone
        except (OSError, ValueError):
            return False
        if stat is None or stat[0] not in _EXITED:
            return False
    return True


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
    store's own locks (``acquire_lease(lock_wait=)``): what is left of it, but never
    less than ``wait`` or :data:`LOCK_WAIT_FLOOR`, whichever is less (with ``wait=0``,
    :data:`LOCK_WAIT_FLOOR`), so a grant queued behind ordinary saves is not refused,
    also when the holder lets go as the wait runs out. The call so returns within
    ``wait`` plus at most that much.

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
    ended: set[int] = set()
    while True:
        try:
            if bounded:
                floor = min(wait, LOCK_WAIT_FLOOR) if wait > 0 else LOCK_WAIT_FLOOR
                lock_wait = max(deadline - time.monotonic(), floor)
                lease = store.acquire_lease(session, name, ttl, lock_wait=lock_wait)
            else:
                lease = store.acquire_lease(session, name, ttl)
        except SessionOwned as exc:
            if exc.holder.token not in ended and owner_gone(exc.holder.owner):
                # Its process is provably gone: end its lease by its token and ask again.
                # Two openers doing so race in the store as any two openers do; the old
                # token stays fenced out.
                ended.add(exc.holder.token)
                _log.warning(
                    "session owner exited: taking the session over",
                    session=session,
                    owner=exc.holder.owner,
                    token=exc.holder.token,
                )
                store.release_lease(Lease.of(exc.holder))
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            until_expiry = exc.holder.expires_at - time.time()
            if not until_expiry > 0.0:  # also NaN: a damaged row's (stores treat it as expired)
                until_expiry = 0.0
            until_expiry += 0.01
            abandoned = ABANDONED.get()
            if (abandoned or threading.Event()).wait(min(delay, left, until_expiry)):
                raise  # the caller is gone: nobody waits for this answer
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
        self.look_due = math.inf
        """When the renewer next looks for a cancel request (see :meth:`watch`)."""
        self._watched: tuple[str, threading.Event] | None = None
        self._carries_cancels = isinstance(store, CancelRequests)
        self._watching = threading.Lock()
        """Guards ``_watched`` with ``look_due``: a run watched just as a look found none
        must not be left without looks."""
        self._released = False
        self._pid = os.getpid()
        """The process holding the lease: a forked child never releases it."""
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

    def watch(self, run_id: str, cancel: threading.Event) -> None:
        """Until :meth:`unwatch`, have the renewer look at the lease every
        :data:`CANCEL_LOOK_EVERY` s for a cancel of run ``run_id`` another process
        asked for (``request_cancel``), and set ``cancel`` when it finds one.

        A store without cancel requests is not looked at. The looks go on until one
        finds no run watched, so back-to-back runs wake the renewer once, not once a
        run (each wake-up is a thread switch in the middle of a short run).
        """
        if not self._carries_cancels:
            return
        with self._watching:
            self._watched = (run_id, cancel)
            idle = self.look_due == math.inf
            if idle:
                self.look_due = time.monotonic() + CANCEL_LOOK_EVERY
        if idle:
            _RENEWER.wake()

    def unwatch(self) -> None:
        """The watched run ended (see :meth:`watch`)."""
        with self._watching:
            self._watched = None

    def look(self) -> None:
        """Look for a cancel request of the watched run (renewer thread); set its cancel
        if there is one. A store that fails the read is looked at again next time."""
        with self._watching:
            watched = self._watched
            self.look_due = math.inf if watched is None else time.monotonic() + CANCEL_LOOK_EVERY
        if watched is None:
            return
        run_id, cancel = watched
        try:
            lease = self.store.current_lease(self._lease.session)
        except Exception as exc:  # noqa: BLE001 - the medium failed: look again next time
            _log.warning(
                "session lease not read for cancel requests",
                session=self._lease.session,
                error=str(exc),
            )
            return
        if (
            lease is not None
            and lease.token == self._lease.token
            and lease.cancel_requested == run_id
        ):
            _log.info("run cancelled by request", session=lease.session, run=run_id)
            cancel.set()

    def release(self) -> None:
        """Stop renewing and release the lease in the store. Idempotent; never raises."""
        if self._released:
            return
        self._released = True
        if self._pid != os.getpid():
            return  # a forked child's copy (its renewer forgot it): the lease is the parent's
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

    def wake(self) -> None:
        """Have the loop look at the times again (a look was scheduled)."""
        with self._cond:
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._held:
                    self._thread = None
                    return
                now = time.monotonic()
                due = [o for o in self._held if o.due <= now]
                looks = [o for o in self._held if o.look_due <= now]
                if not due and not looks:
                    self._cond.wait(min(min(o.due, o.look_due) for o in self._held) - now)
                    continue
            # Outside the lock: the store may block. Renewals first: a lease kept is what
            # the session's writes need; a look only speeds a cancel up, and many of
            # them (one per run going on) must not hold a renewal back.
            lost = [o for o in due if not o.renew()]
            if lost:
                with self._cond:
                    self._held.difference_update(lost)
            for ownership in looks:
                ownership.look()

    def forget_parent(self) -> None:
        """In a forked child (its only thread): the leases are the parent's (renewed by
        its renewer, released by it) and the renewer thread does not exist here."""
        self._cond = threading.Condition()
        self._held = set()
        self._thread = None

    def active(self) -> bool:
        """Whether the renewer thread is running (for tests)."""
        with self._cond:
            return self._thread is not None


_RENEWER = _Renewer()
forget_in_children(_RENEWER)
