"""Bounded waits for the built-in stores' locks, and who holds a lock that is not let go.

``flock(2)`` has no timeout; :func:`flock_within` polls a non-blocking attempt
(every 1 ms at first, up to every 20 ms) until its bound. A lock held by another
process past the bound is named in the error through :func:`lock_holders`: on
Linux ``/proc/locks`` lists every granted ``flock`` and ``fcntl`` lock with the
pid of its holder, which is how a stalled writer (stopped by ``SIGSTOP`` or a
debugger inside a save) is told apart from a slow one.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
from collections.abc import Iterator

from actorflow.errors import SessionOwned, StoreLocked

from ._lease import LeaseRow

if sys.platform != "win32":
    import fcntl

__all__ = [
    "bounded_waits",
    "check_lock_wait",
    "describe_holders",
    "flock_within",
    "lease_lock_held",
    "lock_bound",
    "lock_holders",
    "store_lock_held",
]

_FIRST_POLL = 0.001
_MAX_POLL = 0.02

_STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "in uninterruptible I/O",
    "T": "stopped (SIGSTOP or job control)",
    "t": "stopped by a debugger",
    "Z": "exited, not yet reaped",
    "X": "exited",
    "I": "idle",
}


_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "actorflow_store_deadline", default=None
)


@contextlib.contextmanager
def bounded_waits(seconds: float) -> Iterator[None]:
    """Bound every wait for a built-in store's lock in this context (this thread or
    task) by ``seconds`` from now.

    What an open with ``wait=`` sets around its reads: a lock that only a stalled
    process would keep (a FileStore collection stopped half-way holds the store
    lock for as long as it stays stopped) then ends the open within its ``wait``
    with :class:`~actorflow.errors.StoreLocked`, instead of blocking it for good.
    """
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def lock_bound(default: float | None) -> float | None:
    """Seconds a lock wait may take here: what is left of :func:`bounded_waits`' bound
    (when one is set), never more than ``default`` (None: no bound of its own)."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return default
    left = max(deadline - time.monotonic(), 0.0)
    return left if default is None else min(left, default)


def flock_within(fd: int, seconds: float | None, *, shared: bool = False) -> bool:
    """Take ``flock(fd)`` (exclusive unless ``shared``) within ``seconds``; False if not.

    ``None`` waits as long as it takes (a blocking ``flock``).

    Raises:
        OSError: the lock cannot be taken for another reason than contention.
    """
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if seconds is None:
        fcntl.flock(fd, mode)
        return True
    deadline = time.monotonic() + seconds
    delay = _FIRST_POLL
    pause = threading.Event()
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        pause.wait(min(delay, left))
        delay = min(delay * 2, _MAX_POLL)


def lock_holders(path: str | os.PathLike[str], *, start: int | None = None) -> list[int]:
    """Pids holding a granted lock on the file at ``path``, other than this process.

    ``start``: only byte-range locks that begin at this offset (SQLite's WAL write
    lock is byte 120 of its ``-shm`` file). Empty when nobody does, or when this
    system cannot tell (no ``/proc/locks``: not Linux).
    """
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return []
    found: list[int] = []
    for line in lines:
        fields = line.split()
        if len(fields) < 8 or fields[1] == "->":  # "->": a waiter, not a holder
            continue
        try:
            pid = int(fields[4])
            major, minor, inode = fields[5].split(":")
            same = (int(major, 16), int(minor, 16), int(inode)) == (
                os.major(st.st_dev),
                os.minor(st.st_dev),
                st.st_ino,
            )
            begins = int(fields[6])
        except ValueError:
            continue
        mine = pid <= 0 or pid == os.getpid() or pid in found
        if same and (start is None or begins == start) and not mine:
            found.append(pid)
    return found


def describe_holders(pids: list[int]) -> str:
    """``"pid 4242 (stopped (SIGSTOP or job control): python worker.py)"``, or ``""``."""
    return ", ".join(_describe(pid) for pid in pids)


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
        state = _STATES.get(stat[stat.rindex(")") + 2 :].split(" ", 1)[0], "state unknown")
    except (OSError, ValueError):
        return f"pid {pid}"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read(200).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        command = ""
    return f"pid {pid} ({state}{': ' + command if command else ''})"


def check_lock_wait(lock_wait: float | None) -> float | None:
    """``lock_wait`` as a float (or None); ValueError unless a number >= 0."""
    if lock_wait is None:
        return None
    if isinstance(lock_wait, bool) or not isinstance(lock_wait, int | float) or not lock_wait >= 0:
        raise ValueError(f"lock_wait= must be >= 0 seconds, got {lock_wait!r}")
    return float(lock_wait)


def lease_lock_held(
    *,
    session: str,
    where: str,
    lock: str,
    waited: float,
    holder: str,
    row: LeaseRow | None,
    now: float,
) -> StoreLocked | SessionOwned:
    """The error of a grant whose lock stayed held past its bound.

    SessionOwned if ``row`` (read without the lock) is a live lease: the session is
    owned, whoever holds the lock. Otherwise StoreLocked naming the lock and its holder.
    """
    if row is not None and row.live(now):
        return SessionOwned(row.as_lease(session))
    message = (
        f"cannot take the lease of session {session!r} in {where}: {lock} stayed held "
        f"for {waited:.1f} s, "
        + (f"by {holder}" if holder else "by a process this system cannot name")
    )
    if row is not None:
        what = "was released" if row.released else "expired"
        message += f"; the session's last lease (token {row.token}, {row.owner}) {what}"
    message += (
        ". A process stalled inside a save or a lease change of this store holds it "
        "(stopped, paused by a debugger); nothing was changed. Let it go on or end it, "
        "or open with a longer wait="
    )
    return StoreLocked(message, lock=lock, holder=holder)


def store_lock_held(*, where: str, lock: str, path: str, waited: float) -> StoreLocked:
    """The error of a store lock that stayed held past its bound (not a lease's lock)."""
    holder = describe_holders(lock_holders(path))
    return StoreLocked(
        f"cannot use {where}: {lock} stayed held for {waited:.1f} s, "
        + (f"by {holder}" if holder else "by a process this system cannot name")
        + ". A process stalled inside a collection (delete, prune) of this store holds it "
        "(stopped, paused by a debugger); nothing was changed. Let it go on or end it, "
        "or open with a longer wait=",
        lock=lock,
        holder=holder,
    )
